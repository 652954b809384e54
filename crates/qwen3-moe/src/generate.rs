//! Chat generation: render the conversation with the model's chat template, prefill it (reusing the cached
//! prefix), then sample token by token, streaming text deltas until a stop token, a stop string, the token
//! limit, a full context or cancellation.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use diskformer_bpe::chat::{ChatOptions, ChatTemplate, Message};
use diskformer_bpe::{Tokenizer, Utf8Stream};

use crate::{Engine, Error, Result, Sampler, SamplingOptions};

/// How to generate a reply.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GenerateOptions {
    /// Sampling (default greedy).
    pub sampling: SamplingOptions,
    /// Most tokens to generate (default 512).
    pub max_tokens: usize,
    /// Texts that end the reply; the text up to the stop string is emitted, the stop string is not.
    pub stop: Vec<String>,
    /// Let the model think first (default true); off renders an empty think block.
    pub thinking: bool,
    /// Run the prompt in chunks (default true).
    pub batched_prefill: bool,
    /// Set to true from anywhere to end the reply after the current token.
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            sampling: SamplingOptions::greedy(),
            max_tokens: 512,
            stop: Vec::new(),
            thinking: true,
            batched_prefill: true,
            cancel: None,
        }
    }
}

/// Why a reply ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The model produced an end-of-generation token (eos, `<|im_end|>`, `<|endoftext|>`).
    StopToken(u32),
    /// The text reached one of the stop strings.
    StopString(String),
    /// `max_tokens` were generated.
    MaxTokens,
    /// The KV cache is full.
    ContextFull,
    /// The cancel flag was set.
    Cancelled,
}

/// One thing that happened while generating.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A token was generated (the end-of-generation token is reported only in [`EndReason::StopToken`]).
    Token(u32),
    /// Text completed so far (whole UTF-8 characters; held back while it could still be a stop string).
    Text(String),
    /// The reply ended; always the last event.
    End(EndReason),
}

/// The last step's output: its logits to sample from, or (plain greedy sampling) the GPU's pick.
enum Next {
    Logits(Vec<f32>),
    Token(u32),
}

/// A reply in progress: an iterator of [`Event`]s, ending with [`Event::End`] (or an error).
pub struct Generation<'a> {
    engine: &'a mut Engine,
    tokenizer: Arc<Tokenizer>,
    opts: GenerateOptions,
    sampler: Sampler,
    /// What the next token is picked from.
    next: Next,
    recent: Vec<u32>,
    utf8: Utf8Stream,
    text: String,
    emitted: usize,
    produced: usize,
    events: VecDeque<Event>,
    done: bool,
}

impl Engine {
    /// Starts a reply to `messages`: renders them with the model's chat template, prefills the prompt (the
    /// prefix it shares with the cache is not run again) and returns the events to come.
    ///
    /// # Errors
    /// [`Error::BadOption`] for bad sampling options; [`Error::ContextFull`] when the prompt does not fit;
    /// pool and GPU errors.
    pub fn generate(&mut self, messages: &[Message], opts: &GenerateOptions) -> Result<Generation<'_>> {
        opts.sampling.validate().map_err(|what| Error::BadOption { option: "sampling", what })?;
        let prompt = self.prompt_ids(messages, opts.thinking);
        let logits = self.prefill(&prompt, opts.batched_prefill)?;
        let tokenizer = self.tokenizer_arc();
        Ok(Generation {
            engine: self,
            tokenizer,
            sampler: Sampler::new(opts.sampling),
            opts: opts.clone(),
            next: Next::Logits(logits),
            recent: prompt,
            utf8: Utf8Stream::default(),
            text: String::new(),
            emitted: 0,
            produced: 0,
            events: VecDeque::new(),
            done: false,
        })
    }

    /// The prompt token ids of `messages` with an open assistant turn.
    pub fn prompt_ids(&self, messages: &[Message], thinking: bool) -> Vec<u32> {
        let template = ChatTemplate::for_pre_tokenizer(self.tokenizer().pre_tokenizer());
        let chat = ChatOptions { enable_thinking: thinking, ..ChatOptions::default() };
        self.tokenizer().encode(&template.render(messages, &chat), true)
    }
}

impl Generation<'_> {
    /// Generates until the next event is ready.
    fn advance(&mut self) -> Result<()> {
        if self.opts.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return self.end(EndReason::Cancelled);
        }
        if self.produced >= self.opts.max_tokens {
            return self.end(EndReason::MaxTokens);
        }
        let id = match &self.next {
            Next::Logits(logits) => self.sampler.sample(logits, &self.recent),
            Next::Token(id) => *id,
        };
        if self.tokenizer.is_end_of_generation(id) {
            return self.end(EndReason::StopToken(id));
        }
        self.produced += 1;
        self.recent.push(id);
        self.events.push_back(Event::Token(id));
        if let Some(delta) = self.utf8.push(self.tokenizer.token_to_piece(id).unwrap_or_default()) {
            self.text.push_str(&delta);
        }
        if let Some((at, stop)) = self.find_stop() {
            self.emit_to(at);
            return self.end(EndReason::StopString(stop));
        }
        self.emit_to(self.safe_end());
        if self.produced < self.opts.max_tokens {
            // Plain greedy: the GPU's argmax (ties to the lower index, as the sampler's); top-k up to 64:
            // the GPU's draw, penalties included (as the sampler draws); with every expert resident either
            // is queued ahead of the read (run-ahead). Else the logits, for the CPU sampler.
            let stepped = if self.opts.sampling.is_plain_greedy() {
                self.engine.step_greedy(id).map(Next::Token)
            } else if self.engine.samples_on_gpu(&self.opts.sampling) {
                self.engine.step_sampled(id, &mut self.sampler).map(Next::Token)
            } else {
                self.engine.step(id).map(Next::Logits)
            };
            match stepped {
                Ok(next) => self.next = next,
                Err(Error::ContextFull { .. }) => return self.end(EndReason::ContextFull),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The first stop string in the text not yet emitted (it may start in held-back text).
    fn find_stop(&self) -> Option<(usize, String)> {
        self.opts
            .stop
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.text[self.emitted..].find(s.as_str()).map(|i| (self.emitted + i, s.clone())))
            .min_by_key(|(i, _)| *i)
    }

    /// Where emitting must stop so that a stop string still arriving is never shown: before the longest
    /// suffix of the text that begins some stop string.
    fn safe_end(&self) -> usize {
        let text = &self.text;
        let held = self
            .opts
            .stop
            .iter()
            .flat_map(|s| (1..s.len()).filter(|&n| s.is_char_boundary(n)).map(move |n| &s[..n]))
            .filter(|prefix| text.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        (text.len() - held).max(self.emitted)
    }

    fn emit_to(&mut self, end: usize) {
        if end > self.emitted {
            self.events.push_back(Event::Text(self.text[self.emitted..end].to_owned()));
            self.emitted = end;
        }
    }

    fn end(&mut self, reason: EndReason) -> Result<()> {
        if !matches!(reason, EndReason::StopString(_)) {
            if let Some(rest) = self.utf8.flush() {
                self.text.push_str(&rest);
            }
            self.emit_to(self.text.len());
        }
        self.events.push_back(Event::End(reason));
        self.done = true;
        Ok(())
    }

    /// The reply's text so far (what was emitted).
    pub fn text(&self) -> &str {
        &self.text[..self.emitted]
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(e) = self.events.pop_front() {
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.advance() {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}
