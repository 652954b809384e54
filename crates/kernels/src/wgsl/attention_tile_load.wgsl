// The K or V tile loader of the chunk attention kernels (attention_tiled, attention_flash; appended after
// their own file, which declares `p`, the cache planes `k` and `v`, the tile `kv` ([keys, d/4 + 1], rows
// padded) and its workgroup size `WG`).

// Entry e of the tile (key e / d4, vec4 e % d4) of cache plane `which` (0: K, 1: V) into kv; keys at or
// past len, and entries past the tile, give zeros / nothing.
fn load_entry(which: u32, e: u32, c: u32, len: u32, n: u32, d4: u32, kvh: u32) {
    if (e >= n) {
        return;
    }
    let j = e / d4;
    var x = vec4<f16>(0.0);
    if (c + j < len) {
        let at = (c + j) * p.kv_heads * d4 + kvh * d4 + e % d4;
        if (which == 0u) {
            x = k[at];
        } else {
            x = v[at];
        }
    }
    kv[j * (d4 + 1u) + e % d4] = x;
}

// The tile of kt keys from position c: kt x d/4 <= 4 x WG entries, at most 4 a lane, written out (no loop).
fn load_tile(which: u32, c: u32, len: u32, kt: u32, d4: u32, kvh: u32, li: u32) {
    let n = kt * d4;
    load_entry(which, li, c, len, n, d4, kvh);
    load_entry(which, li + WG, c, len, n, d4, kvh);
    load_entry(which, li + 2u * WG, c, len, n, d4, kvh);
    load_entry(which, li + 3u * WG, c, len, n, d4, kvh);
}
