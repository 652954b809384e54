//! Chat generation over any model's engine ([`Decoder`]): render the conversation with the model's chat
//! template, prefill it (reusing the cached prefix), then sample token by token, streaming text deltas until a
//! stop token, a stop string, the token limit, a full context or cancellation.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use diskformer_bpe::chat::{ChatOptions, Message, Role};
use diskformer_bpe::{Tokenizer, Utf8Stream};

use crate::{Sampler, SamplingOptions};

/// What generation drives: a model's engine, its tokenizer, a prefill and one step at a time.
pub trait Decoder {
    /// The engine's error.
    type Error;

    /// The model's tokenizer.
    fn tokenizer(&self) -> Arc<Tokenizer>;

    /// Runs `ids` after the prefix of them the cache already holds (not run again) and returns the last
    /// position's logits.
    ///
    /// # Errors
    /// The engine's; [`Decoder::is_context_full`] says which mean the prompt does not fit.
    fn prefill(&mut self, ids: &[u32], batched: bool) -> Result<Vec<f32>, Self::Error>;

    /// Runs `id` after the cache and returns what the next token is picked from: the engine picks it itself
    /// where it can draw as `sampler` would (plain greedy, sampling on the GPU), else the logits.
    ///
    /// # Errors
    /// The engine's; [`Decoder::is_context_full`] says which mean the cache is full.
    fn step_next(&mut self, id: u32, sampler: &mut Sampler) -> Result<Next, Self::Error>;

    /// Whether `error` says the cache cannot take the tokens asked for.
    fn is_context_full(error: &Self::Error) -> bool;

    /// The engine's error for sampling options that are out of range.
    fn bad_sampling(what: String) -> Self::Error;
}

/// What a step hands back for the next token.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// The logits to sample from.
    Logits(Vec<f32>),
    /// The token the engine picked (as the sampler would have).
    Token(u32),
}

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

/// A reply in progress: an iterator of [`Event`]s, ending with [`Event::End`] (or an error).
pub struct Generation<'a, D: Decoder + ?Sized> {
    engine: &'a mut D,
    tokenizer: Arc<Tokenizer>,
    opts: GenerateOptions,
    sampler: Sampler,
    /// What the next token is picked from.
    next: Next,
    prompt_tokens: usize,
    recent: Vec<u32>,
    utf8: Utf8Stream,
    text: String,
    emitted: usize,
    produced: usize,
    events: VecDeque<Event>,
    done: bool,
}

/// The prompt token ids of `messages` with an open assistant turn, rendered with the model's own chat
/// template where it has one that renders, and its family's built-in one otherwise
/// ([`Tokenizer::render_chat`]).
pub fn prompt_ids(tokenizer: &Tokenizer, messages: &[Message], thinking: bool) -> Vec<u32> {
    let chat = ChatOptions { enable_thinking: thinking, ..ChatOptions::default() };
    tokenizer.encode(&tokenizer.render_chat(messages, &chat), true)
}

/// Drops the oldest turns of a conversation until its prompt leaves `room` of `context` positions for the
/// reply, and returns how many messages went: a turn is a user message with the messages after it up to the
/// next user message; system messages stay, and so does the last turn (whose prompt alone may still not
/// fit: the prefill then says so). The cached prefix no longer matches after a drop, so the next reply runs
/// its whole prompt again.
pub fn fit_to_context(
    tokenizer: &Tokenizer,
    messages: &mut Vec<Message>,
    thinking: bool,
    context: usize,
    room: usize,
) -> usize {
    let before = messages.len();
    while prompt_ids(tokenizer, messages, thinking).len() + room > context {
        let Some(first) = messages.iter().position(|m| m.role == Role::User) else { break };
        let Some(next) = messages[first + 1..].iter().position(|m| m.role == Role::User) else { break };
        // The first turn, and any non-system messages before it.
        let mut at = 0;
        messages.retain(|m| {
            at += 1;
            m.role == Role::System || at > first + 1 + next
        });
    }
    before - messages.len()
}

impl<'a, D: Decoder + ?Sized> Generation<'a, D> {
    /// Starts a reply to `messages`: renders them with the model's chat template, prefills the prompt (the
    /// prefix it shares with the cache is not run again) and returns the events to come.
    ///
    /// # Errors
    /// [`Decoder::bad_sampling`] for bad sampling options; the prefill's errors (a prompt that does not fit
    /// among them).
    pub fn start(engine: &'a mut D, messages: &[Message], opts: &GenerateOptions) -> Result<Self, D::Error> {
        let prompt = prompt_ids(&engine.tokenizer(), messages, opts.thinking);
        Self::from_prompt(engine, prompt, opts)
    }

    /// Starts a reply that continues the token ids `prompt` as they are (no chat template): prefills them
    /// (the prefix they share with the cache is not run again) and returns the events to come.
    ///
    /// # Errors
    /// As [`Generation::start`].
    pub fn from_prompt(
        engine: &'a mut D,
        prompt: Vec<u32>,
        opts: &GenerateOptions,
    ) -> Result<Self, D::Error> {
        opts.sampling.validate().map_err(D::bad_sampling)?;
        let logits = engine.prefill(&prompt, opts.batched_prefill)?;
        let tokenizer = engine.tokenizer();
        Ok(Generation {
            engine,
            tokenizer,
            sampler: Sampler::new(opts.sampling),
            opts: opts.clone(),
            next: Next::Logits(logits),
            prompt_tokens: prompt.len(),
            recent: prompt,
            utf8: Utf8Stream::default(),
            text: String::new(),
            emitted: 0,
            produced: 0,
            events: VecDeque::new(),
            done: false,
        })
    }

    /// Tokens of the prompt (the cached prefix included).
    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    /// Generates until the next event is ready.
    fn advance(&mut self) -> Result<(), D::Error> {
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
            match self.engine.step_next(id, &mut self.sampler) {
                Ok(next) => self.next = next,
                Err(e) if D::is_context_full(&e) => return self.end(EndReason::ContextFull),
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

    fn end(&mut self, reason: EndReason) -> Result<(), D::Error> {
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

impl<D: Decoder + ?Sized> Iterator for Generation<'_, D> {
    type Item = Result<Event, D::Error>;

    fn next(&mut self) -> Option<Self::Item> {
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

#[cfg(test)]
mod tests {
    use diskformer_bpe::{PreTokenizer, TokenType, TokenizerBuilder};

    use super::*;

    #[derive(Debug, PartialEq)]
    enum ScriptError {
        ContextFull,
        BadSampling(String),
    }

    /// An engine that picks the bytes of a script, one a step, and fills its cache after `ctx` positions.
    struct Script {
        tokenizer: Arc<Tokenizer>,
        script: Vec<u32>,
        cached: usize,
        ctx: usize,
        prefills: usize,
    }

    const END: u32 = 256;

    impl Script {
        fn new(text: &str, ctx: usize) -> Self {
            let mut tokens: Vec<String> = (0..=255u8).map(diskformer_bpe::byte_level_text).collect();
            tokens.push("<|im_end|>".into());
            let mut types = vec![TokenType::Normal; 256];
            types.push(TokenType::Control);
            let tokenizer = TokenizerBuilder::new(PreTokenizer::Qwen2, tokens, types, vec![])
                .eos_token_id(Some(END))
                .build();
            let mut script: Vec<u32> = text.bytes().map(u32::from).collect();
            script.push(END);
            Script { tokenizer: Arc::new(tokenizer.unwrap()), script, cached: 0, ctx, prefills: 0 }
        }

        /// Logits whose argmax is the script's token at the cache's position past the prompt.
        fn logits(&self, at: usize) -> Vec<f32> {
            let mut l = vec![0.0; END as usize + 1];
            l[self.script[at.min(self.script.len() - 1)] as usize] = 1.0;
            l
        }
    }

    impl Decoder for Script {
        type Error = ScriptError;

        fn tokenizer(&self) -> Arc<Tokenizer> {
            Arc::clone(&self.tokenizer)
        }

        fn prefill(&mut self, ids: &[u32], _batched: bool) -> Result<Vec<f32>, ScriptError> {
            self.prefills += 1;
            if ids.len() > self.ctx {
                return Err(ScriptError::ContextFull);
            }
            self.cached = ids.len();
            Ok(self.logits(0))
        }

        fn step_next(&mut self, _id: u32, sampler: &mut Sampler) -> Result<Next, ScriptError> {
            if self.cached + 1 > self.ctx {
                return Err(ScriptError::ContextFull);
            }
            self.cached += 1;
            let logits = self.logits(self.produced());
            // The engine picks greedy itself, as an engine with a GPU argmax does; else the logits.
            if sampler.options().is_plain_greedy() {
                Ok(Next::Token(self.script[self.produced().min(self.script.len() - 1)]))
            } else {
                Ok(Next::Logits(logits))
            }
        }

        fn is_context_full(error: &ScriptError) -> bool {
            *error == ScriptError::ContextFull
        }

        fn bad_sampling(what: String) -> ScriptError {
            ScriptError::BadSampling(what)
        }
    }

    impl Script {
        /// Tokens generated so far (the cache past the prompt).
        fn produced(&self) -> usize {
            self.cached - self.prompt_len()
        }

        fn prompt_len(&self) -> usize {
            prompt_ids(&self.tokenizer, &[Message::user("hi")], true).len()
        }
    }

    fn run(engine: &mut Script, opts: &GenerateOptions) -> (String, Vec<u32>, EndReason) {
        let (mut text, mut ids, mut end) = (String::new(), Vec::new(), None);
        for event in Generation::start(engine, &[Message::user("hi")], opts).unwrap() {
            match event.unwrap() {
                Event::Text(t) => text.push_str(&t),
                Event::Token(id) => ids.push(id),
                Event::End(reason) => end = Some(reason),
            }
        }
        (text, ids, end.expect("the last event is End"))
    }

    #[test]
    fn a_reply_streams_the_text_and_ends_at_the_end_token() {
        let mut e = Script::new("héllo wörld", 4096);
        let (text, ids, end) = run(&mut e, &GenerateOptions::default());
        assert_eq!(text, "héllo wörld");
        assert_eq!(ids.len(), "héllo wörld".len());
        assert_eq!(end, EndReason::StopToken(END));
    }

    #[test]
    fn the_same_reply_from_logits_sampled_greedily_on_the_host() {
        let mut e = Script::new("héllo wörld", 4096);
        let mut opts = GenerateOptions::default();
        // Not plain greedy (a penalty that changes nothing here): the engine hands back logits.
        opts.sampling.repetition_penalty = 1.0 + f32::EPSILON;
        opts.sampling.penalty_last_n = 0;
        let (text, _, end) = run(&mut e, &opts);
        assert_eq!((text.as_str(), end), ("héllo wörld", EndReason::StopToken(END)));
    }

    #[test]
    fn a_stop_string_is_never_shown_even_split_across_tokens() {
        let mut e = Script::new("one two three", 4096);
        let opts =
            GenerateOptions { stop: vec!["o th".into(), "never".into()], ..GenerateOptions::default() };
        let (text, _, end) = run(&mut e, &opts);
        assert_eq!(text, "one tw");
        assert_eq!(end, EndReason::StopString("o th".into()));
    }

    #[test]
    fn limits_end_the_reply_with_their_reason_and_the_text_so_far() {
        let mut opts = GenerateOptions { max_tokens: 3, ..GenerateOptions::default() };
        assert_eq!(
            run(&mut Script::new("abcdef", 4096), &opts),
            ("abc".into(), vec![97, 98, 99], EndReason::MaxTokens)
        );

        let mut e = Script::new("abcdef", 0);
        let prompt = e.prompt_len();
        e.ctx = prompt + 2; // the prompt, then two steps fit
        let (text, _, end) = run(&mut e, &GenerateOptions::default());
        assert_eq!((text.as_str(), end), ("abc", EndReason::ContextFull));

        let cancel = Arc::new(AtomicBool::new(true));
        opts.cancel = Some(Arc::clone(&cancel));
        assert_eq!(run(&mut Script::new("abc", 4096), &opts), (String::new(), vec![], EndReason::Cancelled));
    }

    #[test]
    fn the_oldest_turns_go_until_the_prompt_leaves_room_for_the_reply() {
        let tokenizer = Script::new("", 0).tokenizer;
        let turn =
            |n: usize| [Message::user(format!("question {n}")), Message::assistant(format!("answer {n}"))];
        let mut chat = vec![Message::system("be brief")];
        (0..4).for_each(|n| chat.extend(turn(n)));
        chat.push(Message::user("last"));
        let full = prompt_ids(&tokenizer, &chat, false).len();

        let mut kept = chat.clone();
        assert_eq!(fit_to_context(&tokenizer, &mut kept, false, full + 10, 10), 0, "it fits as it is");
        assert_eq!(kept, chat);

        let dropped = fit_to_context(&tokenizer, &mut kept, false, full + 9, 10);
        assert_eq!(dropped, 2, "one turn: a question and its answer");
        assert_eq!(kept[0], chat[0], "the system message stays");
        assert_eq!(kept[1..], chat[3..]);
        assert!(prompt_ids(&tokenizer, &kept, false).len() + 10 <= full + 9);

        // However small the context, the system message and the last question stay.
        assert_eq!(fit_to_context(&tokenizer, &mut kept, false, 1, 0), 6);
        assert_eq!(kept, [chat[0].clone(), Message::user("last")]);
    }

    #[test]
    fn bad_options_and_a_prompt_past_the_context_are_errors_before_any_token() {
        let mut e = Script::new("abc", 4096);
        let mut opts = GenerateOptions::default();
        opts.sampling.temperature = -1.0;
        let err = Generation::start(&mut e, &[Message::user("hi")], &opts).err().unwrap();
        assert!(matches!(err, ScriptError::BadSampling(_)), "{err:?}");
        assert_eq!(e.prefills, 0, "refused before the prefill");

        let mut e = Script::new("abc", 3);
        let err =
            Generation::start(&mut e, &[Message::user("hi")], &GenerateOptions::default()).err().unwrap();
        assert_eq!(err, ScriptError::ContextFull);
    }
}
