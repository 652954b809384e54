// The product of the int8 tiled Q8_0 GEMMs (q8_gemm_i8, expert_q8_gemm_i8; appended to both after their own
// file, which declares `p.cols`, `q: array<vec4<u32>>` and `scales: array<f16>`; the input `x` is declared
// here: rows of quantize_q8's output, cols / 4 words of int8 then cols / 32 f32 scales). Per step of two
// 32-column Q8_0 blocks a workgroup of 128 lanes copies 128 weight rows' int8 and scales and 32 tokens'
// (pairs') int8 and scales into workgroup memory as they are (11.3 KB, no decoding), then lane li multiplies
// rows 8 * rg.. by tokens 4 * tg.. (rg = 4 * (li / 32) + (li % 32) / 8, tg = li % 8; as q8_tile.wgsl) with
// dot4I8Packed: exact int32 sums of the block, scaled by the row's and the token's scales once per block (what
// llama.cpp's CPU path and its GPU MMQ kernels compute). Per 4 columns two vec4 loads of weight words and one
// of input words for 32 four-way dot products.

@group(0) @binding(1) var<storage, read> x: array<u32>; // input rows, quantize_q8's

// Words of `x` a row: cols int8, 4 a word, then cols / 32 scales.
fn x_row_len() -> u32 {
    return 9u * p.cols / 32u;
}

var<workgroup> tile_w: array<vec4<u32>, 512>;  // [16 words][32]: rows 4i..4i+3
var<workgroup> tile_sw: array<vec4<f32>, 64>;  // [2 blocks][32] row scales, 4 rows each
var<workgroup> tile_x: array<vec4<u32>, 128>;  // [16 words][8]: tokens 4j..4j+3
var<workgroup> tile_sx: array<vec4<f32>, 16>;  // [2 blocks][8] token scales, 4 tokens each

// The 4 rows of `w` against token word `t`: their 4-way dot products.
fn dot4x(w: vec4<u32>, t: u32) -> vec4<i32> {
    return vec4<i32>(dot4I8Packed(w.x, t), dot4I8Packed(w.y, t), dot4I8Packed(w.z, t), dot4I8Packed(w.w, t));
}

// Block `blk` (0 or 1) of the step in workgroup memory, for the lane's rows (`rows4`: the vec4 index of its
// first 4 in a word's column, tile_rows / 4) and tokens (`tokens4`: tile_tokens / 4), added into `a`
// ([2 * j + h] as tile_product returns it).
fn block_product(blk: u32, rows4: u32, tokens4: u32, a: ptr<function, array<vec4<f32>, 8>>) {
    var i0 = vec4<i32>(0);
    var i1 = vec4<i32>(0);
    var i2 = vec4<i32>(0);
    var i3 = vec4<i32>(0);
    var i4 = vec4<i32>(0);
    var i5 = vec4<i32>(0);
    var i6 = vec4<i32>(0);
    var i7 = vec4<i32>(0);
    for (var k = blk * 8u; k < blk * 8u + 8u; k++) {
        let wl = tile_w[k * 32u + rows4];
        let wh = tile_w[k * 32u + rows4 + 1u];
        let t = tile_x[k * 8u + tokens4];
        i0 += dot4x(wl, t.x);
        i1 += dot4x(wh, t.x);
        i2 += dot4x(wl, t.y);
        i3 += dot4x(wh, t.y);
        i4 += dot4x(wl, t.z);
        i5 += dot4x(wh, t.z);
        i6 += dot4x(wl, t.w);
        i7 += dot4x(wh, t.w);
    }
    let sl = tile_sw[blk * 32u + rows4];
    let sh = tile_sw[blk * 32u + rows4 + 1u];
    let st = tile_sx[blk * 8u + tokens4];
    (*a)[0] += i32x4_to_f32(i0) * (sl * st.x);
    (*a)[1] += i32x4_to_f32(i1) * (sh * st.x);
    (*a)[2] += i32x4_to_f32(i2) * (sl * st.y);
    (*a)[3] += i32x4_to_f32(i3) * (sh * st.y);
    (*a)[4] += i32x4_to_f32(i4) * (sl * st.z);
    (*a)[5] += i32x4_to_f32(i5) * (sh * st.z);
    (*a)[6] += i32x4_to_f32(i6) * (sl * st.w);
    (*a)[7] += i32x4_to_f32(i7) * (sh * st.w);
}

// Lane li's products: [2 * j + h] = rows tile_rows(li) + 4h.. for token tile_tokens(li) + j (as in q8_tile.wgsl). Lane li brings, two blocks at a time, the int8 and scales of weight row `lrow` (the plane
// row for the tile's row li, clamped by the caller) and four words of input row `xrow` (a word index, the
// tile's token li % 32; zeros unless `live`; words 4 * (li / 32).. of the step's 16) with, for lanes li < 64,
// one of its two scales. A block past the row's end (odd block counts) reads the last one, its weight and
// input scales 0. Call from uniform control flow (it holds barriers).
fn tile_product(li: u32, lrow: u32, xrow: u32, live: bool) -> array<vec4<f32>, 8> {
    let nblk = p.cols / 32u;
    let lt = li % 32u;
    let x_word = 4u * (li / 32u); // the first of the lane's 4 input words of a step's 16
    let x_scale_blk = (li / 32u) % 2u; // the block whose input scale lanes li < 64 bring
    let rows4 = tile_rows(li) / 4u;
    let tokens4 = tile_tokens(li) / 4u;
    let x_scales = xrow + 8u * nblk; // the input row's scales
    var a = array<vec4<f32>, 8>();
    // Register double buffering: step s + 1's global loads are issued before step s's multiply (the loop
    // runs one step past the last load to multiply it).
    var w0 = vec4<u32>(0u);
    var w1 = vec4<u32>(0u);
    var w2 = vec4<u32>(0u);
    var w3 = vec4<u32>(0u);
    var sw = vec2<f32>(0.0);
    var xw = vec4<u32>(0u);
    var sx = 0.0;
    for (var b = 0u; b < nblk + 2u; b += 2u) {
        if (b > 0u) {
            workgroupBarrier(); // the last step's reads are done
            let c = li % 4u;
            let wi = li / 4u;
            tile_w[0u * 32u + wi][c] = w0.x;
            tile_w[1u * 32u + wi][c] = w0.y;
            tile_w[2u * 32u + wi][c] = w0.z;
            tile_w[3u * 32u + wi][c] = w0.w;
            tile_w[4u * 32u + wi][c] = w1.x;
            tile_w[5u * 32u + wi][c] = w1.y;
            tile_w[6u * 32u + wi][c] = w1.z;
            tile_w[7u * 32u + wi][c] = w1.w;
            tile_w[8u * 32u + wi][c] = w2.x;
            tile_w[9u * 32u + wi][c] = w2.y;
            tile_w[10u * 32u + wi][c] = w2.z;
            tile_w[11u * 32u + wi][c] = w2.w;
            tile_w[12u * 32u + wi][c] = w3.x;
            tile_w[13u * 32u + wi][c] = w3.y;
            tile_w[14u * 32u + wi][c] = w3.z;
            tile_w[15u * 32u + wi][c] = w3.w;
            tile_sw[wi][c] = sw.x;
            tile_sw[32u + wi][c] = sw.y;
            tile_x[x_word * 8u + lt / 4u][lt % 4u] = xw.x;
            tile_x[(x_word + 1u) * 8u + lt / 4u][lt % 4u] = xw.y;
            tile_x[(x_word + 2u) * 8u + lt / 4u][lt % 4u] = xw.z;
            tile_x[(x_word + 3u) * 8u + lt / 4u][lt % 4u] = xw.w;
            if (li < 64u) {
                tile_sx[x_scale_blk * 8u + lt / 4u][lt % 4u] = sx;
            }
            workgroupBarrier();
        }
        if (b < nblk) {
            // This step's loads: blocks b and b + 1 (past the end, the last block again with scales 0).
            let next = min(b + 1u, nblk - 1u);
            let has_next = b + 1u < nblk;
            w0 = q[(lrow * nblk + b) * 2u];
            w1 = q[(lrow * nblk + b) * 2u + 1u];
            w2 = q[(lrow * nblk + next) * 2u];
            w3 = q[(lrow * nblk + next) * 2u + 1u];
            sw = vec2<f32>(f32(scales[lrow * nblk + b]), select(0.0, f32(scales[lrow * nblk + next]), has_next));
            let xb = xrow + select(b, next, x_word >= 8u) * 8u + x_word % 8u;
            xw = select(vec4<u32>(0u), vec4<u32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]), live);
            let sblk = select(b, next, x_scale_blk == 1u);
            sx = select(0.0, bitcast<f32>(x[x_scales + sblk]), live && (x_scale_blk == 0u || has_next));
        }
        if (b > 0u) {
            block_product(0u, rows4, tokens4, &a);
            block_product(1u, rows4, tokens4, &a);
        }
    }
    return a;
}
