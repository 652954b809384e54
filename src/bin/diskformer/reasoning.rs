//! Splits a streamed reply into the model's reasoning (`<think>…</think>`) and its answer, as llama-server
//! returns them (`reasoning_content` apart from `content`), holding back text that may still turn out to be a
//! tag.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: a `<think>` may still open the reply.
    Start,
    /// Inside the reasoning, until `</think>`.
    Reasoning,
    /// The answer.
    Answer,
}

/// Text of each kind a delta completed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub answer: String,
}

/// The state of one reply's split.
#[derive(Debug)]
pub struct ReasoningSplitter {
    state: State,
    /// Text not yet assigned (a prefix of a tag, or leading whitespace).
    held: String,
    /// Whether the answer has started (its leading newlines are dropped).
    answered: bool,
    reasoned: bool,
}

impl ReasoningSplitter {
    /// A splitter for a reply whose prompt already opened the reasoning (`in_reasoning`: the template put
    /// `<think>` at the end of the prompt) or not.
    pub fn new(in_reasoning: bool) -> Self {
        let state = if in_reasoning { State::Reasoning } else { State::Start };
        ReasoningSplitter { state, held: String::new(), answered: false, reasoned: false }
    }

    /// Takes the next piece of the reply's text.
    pub fn push(&mut self, delta: &str) -> Split {
        self.held.push_str(delta);
        let mut out = Split::default();
        loop {
            match self.state {
                State::Start => {
                    let rest = self.held.trim_start();
                    if let Some(after) = rest.strip_prefix(OPEN) {
                        self.held = after.to_owned();
                        self.state = State::Reasoning;
                    } else if OPEN.starts_with(rest) {
                        return out; // still possibly the tag (or only whitespace so far)
                    } else {
                        self.state = State::Answer;
                    }
                }
                State::Reasoning => match self.held.find(CLOSE) {
                    Some(at) => {
                        let after = self.held.split_off(at);
                        let reasoning = std::mem::replace(&mut self.held, after[CLOSE.len()..].to_owned());
                        self.emit_reasoning(&mut out, &reasoning);
                        self.state = State::Answer;
                    }
                    None => {
                        let keep = partial_suffix(&self.held, CLOSE);
                        let ready = self.held[..self.held.len() - keep].to_owned();
                        self.held.drain(..self.held.len() - keep);
                        self.emit_reasoning(&mut out, &ready);
                        return out;
                    }
                },
                State::Answer => {
                    let text = std::mem::take(&mut self.held);
                    self.emit_answer(&mut out, &text);
                    return out;
                }
            }
        }
    }

    /// The text still held at the end of the reply.
    pub fn finish(&mut self) -> Split {
        let mut out = Split::default();
        let text = std::mem::take(&mut self.held);
        match self.state {
            State::Reasoning => self.emit_reasoning(&mut out, &text),
            State::Start | State::Answer => self.emit_answer(&mut out, &text),
        }
        out
    }

    fn emit_reasoning(&mut self, out: &mut Split, text: &str) {
        // The newline after `<think>` is the template's, not the reasoning's.
        let text = if self.reasoned { text } else { text.trim_start_matches('\n') };
        self.reasoned |= !text.is_empty();
        out.reasoning.push_str(text);
    }

    fn emit_answer(&mut self, out: &mut Split, text: &str) {
        // So are the newlines after `</think>`.
        let text = if self.answered { text } else { text.trim_start_matches('\n') };
        self.answered |= !text.is_empty();
        out.answer.push_str(text);
    }
}

/// The length of the longest suffix of `text` that begins `tag` (a tag possibly arriving in pieces).
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole split of `pieces`, fed one by one.
    fn split(in_reasoning: bool, pieces: &[&str]) -> (String, String) {
        let mut s = ReasoningSplitter::new(in_reasoning);
        let (mut reasoning, mut answer) = (String::new(), String::new());
        let mut outs: Vec<Split> = pieces.iter().map(|p| s.push(p)).collect();
        outs.push(s.finish());
        for out in outs {
            reasoning.push_str(&out.reasoning);
            answer.push_str(&out.answer);
        }
        (reasoning, answer)
    }

    #[test]
    fn reasoning_and_answer_come_apart_however_the_text_is_cut() {
        let text = "<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.";
        let want = ("Let me see: 2+2.\n".to_owned(), "It is 4.".to_owned());
        assert_eq!(split(false, &[text]), want);
        for cut in 1..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(split(false, &[a, b]), want, "cut at {cut}");
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        assert_eq!(split(false, &chars.iter().map(String::as_str).collect::<Vec<_>>()), want);
    }

    #[test]
    fn a_reply_without_reasoning_is_all_answer() {
        assert_eq!(
            split(false, &["Hello", " <think> is a tag"]),
            (String::new(), "Hello <think> is a tag".into())
        );
        assert_eq!(split(false, &["<thi"]), (String::new(), "<thi".into()), "an unfinished tag at the end");
        assert_eq!(split(false, &["<thx>"]), (String::new(), "<thx>".into()));
    }

    #[test]
    fn a_prompt_that_opened_the_reasoning_and_an_unclosed_one() {
        assert_eq!(split(true, &["hm", "m</thi", "nk>ok"]), ("hmm".into(), "ok".into()));
        assert_eq!(split(false, &["<think>never closed </th"]), ("never closed </th".into(), String::new()));
    }

    #[test]
    fn multibyte_text_next_to_a_partial_tag() {
        assert_eq!(split(true, &["é</", "think>ü"]), ("é".into(), "ü".into()));
    }
}
