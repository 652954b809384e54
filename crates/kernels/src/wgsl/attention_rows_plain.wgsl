// attention_split without subgroups: rows are summed through workgroup memory (see `scores`).

fn rows_in_subgroups(lpr: u32) -> bool {
    return false;
}

fn row_total(pd: f32, lpr: u32) -> f32 {
    return pd;
}
