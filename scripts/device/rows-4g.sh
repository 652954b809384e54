# Sourced by the 4 GB comparisons (levers.sh, defaults.sh): the row arguments they share (commas for spaces,
# as tiers.sh's ROWS take them), llama.cpp's two best 4 GB configurations, and the model they run on.
B=--budget,4g,--prompt-tokens,512
cal="--routing-trace,.device/calibrated.jsonl"
uni="--routing,uniform"
off=--no-read-checks
export FTYPE=q4_k_m DECODE=${DECODE:-64} LLAMA_ROWS="cpu-moe-40:--n-cpu-moe,40 exps-cpu:-ot,exps=CPU"
