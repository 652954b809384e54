// Repetition, presence and frequency penalties on a one-token step's logits, in place, before sample_top_k
// (as the CPU sampler applies them, llama.cpp's llama_sampler_penalties_apply): each distinct token of the
// window (the step's input token and the last_n - 1 before it, ids past the vocabulary ignored) has its logit
// divided by repetition_penalty when positive, multiplied when not, then presence_penalty subtracted, and
// frequency_penalty once for each time the token occurs in the window.
// The window lives in a ring indexed by position: lane 0 first writes the step's input token (token_ids,
// which the GPU copies from the step before's pick when a step is queued on it) at its position; the host
// writes the earlier positions of the ring before a step it submits itself.

struct Params {
    n: u32,    // vocabulary
    ring: u32, // ring length, PENALTY_MAX_N
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: Step; // sample_step.wgsl
@group(0) @binding(2) var<storage, read> positions: array<u32>;    // [1] the step's position
@group(0) @binding(3) var<storage, read> token_ids: array<u32>;    // [1] the step's input token
@group(0) @binding(4) var<storage, read_write> recent: array<u32>; // [ring] token at position % ring
@group(0) @binding(5) var<storage, read_write> logits: array<f32>; // [n]

@compute @workgroup_size(256)
fn apply_penalties(@builtin(local_invocation_index) li: u32) {
    let pos = positions[0];
    if (li == 0u) {
        recent[pos % p.ring] = token_ids[0];
    }
    storageBarrier();
    let len = min(min(step.last_n, p.ring), pos + 1u);
    if (li >= len) {
        return;
    }
    let t = recent[(pos - li) % p.ring];
    // Once per distinct token: the lane of its most recent position applies it.
    for (var j = 0u; j < li; j++) {
        if (recent[(pos - j) % p.ring] == t) {
            return;
        }
    }
    if (t < p.n) {
        // The occurrences, counted only when they weigh something (the window is read again to the end).
        var count = 1u;
        if (step.frequency_penalty != 0.0) {
            for (var j = li + 1u; j < len; j++) {
                count += u32(recent[(pos - j) % p.ring] == t);
            }
        }
        let l = logits[t];
        let scaled = select(l / step.repetition_penalty, l * step.repetition_penalty, l <= 0.0);
        logits[t] = scaled - step.presence_penalty - f32(count) * step.frequency_penalty;
    }
}
