//! The engine as the runtime's [`Decoder`]: what chat generation ([`Generation`]) drives.

use std::sync::Arc;

use diskformer_bpe::Tokenizer;
use diskformer_bpe::chat::Message;
use diskformer_runtime::{Decoder, GenerateOptions, Next, Sampler};

use crate::{Engine, Error, Result};

/// A reply of the engine in progress.
pub type Generation<'a> = diskformer_runtime::Generation<'a, Engine>;

impl Decoder for Engine {
    type Error = Error;

    fn tokenizer(&self) -> Arc<Tokenizer> {
        self.tokenizer_arc()
    }

    fn prefill(&mut self, ids: &[u32], batched: bool) -> Result<Vec<f32>> {
        Engine::prefill(self, ids, batched)
    }

    fn step_next(&mut self, id: u32, sampler: &mut Sampler) -> Result<Next> {
        // Plain greedy: the GPU's argmax (ties to the lower index, as the sampler's); top-k up to 64: the GPU's
        // draw, penalties included (as the sampler draws); with every expert resident either is queued ahead
        // of the read (run-ahead). Else the logits, for the CPU sampler.
        if sampler.options().is_plain_greedy() {
            self.step_greedy(id).map(Next::Token)
        } else if self.samples_on_gpu(sampler.options()) {
            self.step_sampled(id, sampler).map(Next::Token)
        } else {
            self.step(id).map(Next::Logits)
        }
    }

    fn is_context_full(error: &Error) -> bool {
        matches!(error, Error::ContextFull { .. })
    }

    fn bad_sampling(what: String) -> Error {
        Error::BadOption { option: "sampling", what }
    }
}

impl Engine {
    /// Starts a reply to `messages`: renders them with the model's chat template, prefills the prompt (the
    /// prefix it shares with the cache is not run again) and returns the events to come.
    ///
    /// # Errors
    /// [`Error::BadOption`] for bad sampling options; [`Error::ContextFull`] when the prompt does not fit;
    /// pool and GPU errors.
    pub fn generate(&mut self, messages: &[Message], opts: &GenerateOptions) -> Result<Generation<'_>> {
        Generation::start(self, messages, opts)
    }

    /// The prompt token ids of `messages` with an open assistant turn.
    pub fn prompt_ids(&self, messages: &[Message], thinking: bool) -> Vec<u32> {
        diskformer_runtime::generate::prompt_ids(self.tokenizer(), messages, thinking)
    }
}
