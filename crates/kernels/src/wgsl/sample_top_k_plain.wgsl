// sample_top_k's ranking of a tile without subgroups: the bitonic sort.

fn tile_top(li: u32, k: u32, c: array<vec2<u32>, PER_LANE>, held: u32) {
    bitonic_top(li, k, c, held);
}
