// Reading words at any byte, for the block helpers whose blocks may start mid-word (Q3_K's 110 bytes, Q6_K's
// 210, the 18 to 34 bytes of the legacy types' blocks).

// The 4 bytes of w from byte `b` on, little-endian, whatever b's alignment.
fn byte_word(b: u32) -> u32 {
    let i = b >> 2u;
    let shift = (b & 3u) * 8u;
    if (shift == 0u) {
        return w[i];
    }
    return (w[i] >> shift) | (w[i + 1u] << (32u - shift));
}
