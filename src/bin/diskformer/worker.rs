//! The one engine, on its own thread: requests wait in a bounded queue and run in order; a reply's pieces go
//! back on the request's channel, and a request whose client has gone (its channel closed) is cancelled.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Instant;

use diskformer::api::Timings;
use diskformer::bpe::Tokenizer;
use diskformer::qwen3_moe::qwen35moe::{self, Model};
use diskformer::qwen3_moe::{Engine, EngineOptions, Error, LoadProgress};
use diskformer::runtime::{Decoder, EndReason, Event, GenerateOptions, Generation};
use tokio::sync::mpsc;

/// A request for the engine: a prompt's token ids and how to reply.
pub struct Job {
    pub prompt: Vec<u32>,
    pub opts: GenerateOptions,
    pub updates: mpsc::Sender<Update>,
    /// When the handler queued it.
    pub queued_at: Instant,
}

/// A piece of a reply.
#[derive(Debug)]
pub enum Update {
    /// Text of the reply.
    Text(String),
    /// The reply ended, with the token counts and where the engine's time went.
    End { reason: EndReason, prompt_tokens: usize, completion_tokens: usize, timings: Timings },
    /// The engine failed on this request (it keeps serving others).
    Failed(String),
}

/// What the handlers know of the engine.
pub struct EngineInfo {
    pub tokenizer: Arc<Tokenizer>,
    pub context: usize,
    /// The GPU, described, and whether it is a software renderer.
    pub adapter: String,
    pub software: bool,
    /// The GPU budget the engine was sized for.
    pub budget: Option<u64>,
}

/// The queue into the engine's thread.
#[derive(Clone)]
pub struct Queue(SyncSender<Job>);

impl Queue {
    /// Queues `job`; why not when `len` requests wait already or the engine has stopped.
    pub fn submit(&self, job: Job) -> Result<(), &'static str> {
        match self.0.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err("the queue is full; try again"),
            Err(TrySendError::Disconnected(_)) => Err("the engine has stopped; restart the server"),
        }
    }
}

/// Opens the model on a new thread (the engine stays there) and returns its queue of `len` requests.
pub fn start(
    model: PathBuf,
    store: Option<PathBuf>,
    opts: EngineOptions,
    len: usize,
) -> anyhow::Result<(Queue, EngineInfo)> {
    let (jobs, queue) = sync_channel::<Job>(len);
    let (opened, open_result) = sync_channel(1);
    std::thread::Builder::new().name("engine".into()).spawn(move || {
        match Engine::open_gguf(&model, store.as_deref(), &opts, &mut report_progress()) {
            Ok(mut engine) => {
                let info = EngineInfo {
                    tokenizer: Decoder::tokenizer(&engine),
                    context: engine.max_context() as usize,
                    adapter: engine.adapter(),
                    software: engine.software_adapter(),
                    budget: Some(engine.gpu_budget()),
                };
                if opened.send(Ok(info)).is_ok() {
                    serve(&mut engine, &queue);
                }
            }
            Err(Error::WrongArchitecture { found, .. }) if found == qwen35moe::ARCHITECTURE => {
                let open = qwen35moe::OpenOptions {
                    max_context: opts.max_context,
                    gpu_budget: opts.gpu_budget,
                    cpu: opts.cpu.clone(),
                    store_dir: store,
                    host_arena: opts.stream.host_arena,
                    tensor_prefill: opts.kernels.tensor_prefill,
                    ..qwen35moe::OpenOptions::default()
                };
                let mut model = match Model::open_with(&model, &open, &mut report_progress()) {
                    Ok(m) => m,
                    Err(e) => return drop(opened.send(Err(e.to_string()))),
                };
                eprintln!("qwen35moe: {}", crate::chat::qwen35moe_placement(&model));
                let info = EngineInfo {
                    tokenizer: Decoder::tokenizer(&model),
                    context: model.max_context() as usize,
                    adapter: model.adapter(),
                    software: model.software_adapter(),
                    budget: Some(model.gpu_budget()),
                };
                if opened.send(Ok(info)).is_ok() {
                    serve(&mut model, &queue);
                }
            }
            Err(e) => drop(opened.send(Err(e.to_string()))),
        }
    })?;
    let info = open_result.recv()?.map_err(|e| anyhow::anyhow!("opening the model: {e}"))?;
    Ok((Queue(jobs), info))
}

/// Prints the load's stages to stderr a line each 10 %: an ingest of a 30 GB GGUF takes minutes.
fn report_progress() -> impl FnMut(LoadProgress) {
    let mut last: Option<(&'static str, u64)> = None;
    move |p| {
        let (stage, done, total) = match p {
            LoadProgress::Ingest { done, total, .. } => ("ingest", done, total),
            LoadProgress::Upload { done, total } => ("upload", done, total),
            LoadProgress::Experts { done, total } => ("experts", done, total),
        };
        let tenth = (done * 10).checked_div(total).unwrap_or(10);
        if last != Some((stage, tenth)) {
            last = Some((stage, tenth));
            eprintln!("{stage} {}%", tenth * 10);
        }
    }
}

/// Runs the queued requests one after another until the queue's senders are gone.
fn serve<D: Decoder>(engine: &mut D, queue: &Receiver<Job>)
where
    D::Error: std::fmt::Display,
{
    for job in queue {
        if job.updates.is_closed() {
            continue; // the client left while it waited
        }
        let taken = Instant::now();
        let cancel = Arc::new(AtomicBool::new(false));
        let mut opts = job.opts;
        opts.cancel = Some(Arc::clone(&cancel));
        let updates = job.updates;
        let mut generation = match Generation::from_prompt(engine, job.prompt, &opts) {
            Ok(g) => g,
            Err(e) => {
                let _ = updates.blocking_send(Update::Failed(e.to_string()));
                continue;
            }
        };
        let (prompt_tokens, mut completion_tokens) = (generation.prompt_tokens(), 0);
        let (mut first_token, mut first_text) = (None, None);
        for event in &mut generation {
            let update = match event {
                Ok(Event::Text(t)) => {
                    first_text.get_or_insert_with(Instant::now);
                    Update::Text(t)
                }
                Ok(Event::Token(_)) => {
                    first_token.get_or_insert_with(Instant::now);
                    completion_tokens += 1;
                    continue;
                }
                Ok(Event::End(reason)) => {
                    let end = Instant::now();
                    let first = first_token.unwrap_or(end);
                    let timings = Timings {
                        queued: taken - job.queued_at,
                        prompt: first - taken,
                        first_text: first_text.unwrap_or(end) - taken,
                        predicted: end - first,
                    };
                    Update::End { reason, prompt_tokens, completion_tokens, timings }
                }
                Err(e) => Update::Failed(e.to_string()),
            };
            if updates.blocking_send(update).is_err() {
                cancel.store(true, Ordering::Relaxed); // the client is gone: stop after this token
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use diskformer::bpe::{PreTokenizer, TokenType, TokenizerBuilder};
    use diskformer::runtime::{Next, Sampler};

    use super::*;

    /// An engine that answers "a" forever and counts its steps.
    struct Endless {
        tokenizer: Arc<Tokenizer>,
        steps: usize,
    }

    impl Decoder for Endless {
        type Error = String;

        fn tokenizer(&self) -> Arc<Tokenizer> {
            Arc::clone(&self.tokenizer)
        }

        fn prefill(&mut self, _ids: &[u32], _batched: bool) -> Result<Vec<f32>, String> {
            let mut logits = vec![0.0; 256];
            logits[b'a' as usize] = 1.0;
            Ok(logits)
        }

        fn step_next(&mut self, _id: u32, _sampler: &mut Sampler) -> Result<Next, String> {
            self.steps += 1;
            Ok(Next::Token(u32::from(b'a')))
        }

        fn is_context_full(_: &String) -> bool {
            false
        }

        fn bad_sampling(what: String) -> String {
            what
        }
    }

    #[test]
    fn a_reply_whose_client_left_is_cancelled_and_the_next_one_runs() {
        let tokens: Vec<String> = (0..=255u8).map(diskformer::bpe::byte_level_text).collect();
        let tokenizer =
            TokenizerBuilder::new(PreTokenizer::Qwen2, tokens, vec![TokenType::Normal; 256], vec![]);
        let mut engine = Endless { tokenizer: Arc::new(tokenizer.build().unwrap()), steps: 0 };
        let (jobs, queue) = sync_channel(2);
        let mut opts = GenerateOptions::default();
        opts.max_tokens = 1_000_000;
        // The first client reads one update and leaves; the second reads its reply to the end.
        let (gone, mut gone_rx) = mpsc::channel(1);
        let (kept, mut kept_rx) = mpsc::channel(1);
        jobs.send(Job { prompt: vec![1], opts: opts.clone(), updates: gone, queued_at: Instant::now() })
            .unwrap();
        opts.max_tokens = 5;
        jobs.send(Job { prompt: vec![1], opts, updates: kept, queued_at: Instant::now() }).unwrap();
        drop(jobs);
        let client = std::thread::spawn(move || {
            assert!(matches!(gone_rx.blocking_recv(), Some(Update::Text(_))));
            drop(gone_rx);
            let mut text = String::new();
            loop {
                match kept_rx.blocking_recv() {
                    Some(Update::Text(t)) => text.push_str(&t),
                    Some(Update::End { reason, completion_tokens, timings, .. }) => {
                        // A token's text is handed on after the token.
                        assert!(timings.first_text >= timings.prompt, "{timings:?}");
                        return (text, reason, completion_tokens);
                    }
                    other => panic!("{other:?}"),
                }
            }
        });
        serve(&mut engine, &queue);
        assert_eq!(client.join().unwrap(), ("aaaaa".to_owned(), EndReason::MaxTokens, 5));
        assert!(engine.steps < 1000, "the first reply ran {} steps after its client left", engine.steps);
    }
}
