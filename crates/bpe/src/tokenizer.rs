//! The tokenizer: vocabulary, merges, special tokens; encode and decode.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::byte_level;
use crate::decode::DecodeStream;
use crate::hash::FastMap;
use crate::pairs::{NO_RANK, PairTable};
use crate::special::Specials;
use crate::{Error, PreTokenizer, Rank, Result, TokenId, TokenType};

/// Set in an encoder value when a pre-token piece equal to the token's bytes encodes to that
/// token alone (so BPE can be skipped).
const WHOLE: u32 = 1 << 31;
/// Pieces longer than this (bytes) are merged with a heap rather than a linear scan.
const LONG_PIECE: usize = 96;

/// Collects the parts of a tokenizer and validates them in [`TokenizerBuilder::build`].
///
/// ```
/// use diskformer_bpe::{PreTokenizer, TokenType, TokenizerBuilder};
///
/// // A byte-level vocabulary needs all 256 single bytes; add "ab" = "a" + "b" and a control token.
/// let mut tokens: Vec<String> = (0..=255u8).map(diskformer_bpe::byte_level_text).collect();
/// tokens.push("ab".into());
/// tokens.push("<|end|>".into());
/// let mut types = vec![TokenType::Normal; 257];
/// types.push(TokenType::Control);
/// let tok = TokenizerBuilder::new(PreTokenizer::Qwen2, tokens, types, vec!["a b".into()])
///     .eos_token_id(Some(257))
///     .build()?;
/// assert_eq!(tok.encode("ab<|end|>", true), [256, 257]);
/// assert_eq!(tok.decode(&[256, 257]), b"ab<|end|>");
/// # Ok::<(), diskformer_bpe::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TokenizerBuilder {
    pre: PreTokenizer,
    tokens: Vec<String>,
    types: Vec<TokenType>,
    merges: Vec<String>,
    bos: Option<TokenId>,
    eos: Option<TokenId>,
    pad: Option<TokenId>,
    add_bos: bool,
    ignore_merges: bool,
    chat_template: Option<String>,
}

impl TokenizerBuilder {
    /// Starts from the vocabulary (`tokenizer.ggml.tokens`: byte-level text for normal tokens, literal text
    /// for the others), one type per token, and the merges (`"left right"`, lowest rank first).
    ///
    /// As llama.cpp does when it loads a vocabulary, user-defined tokens whose text is a known
    /// fill-in-the-middle or end-of-generation marker (`<|fim_prefix|>`, `<|repo_name|>`, `<|im_end|>`, …) are
    /// made control tokens.
    pub fn new(pre: PreTokenizer, tokens: Vec<String>, types: Vec<TokenType>, merges: Vec<String>) -> Self {
        Self {
            pre,
            tokens,
            types,
            merges,
            bos: None,
            eos: None,
            pad: None,
            add_bos: false,
            ignore_merges: false,
            chat_template: None,
        }
    }

    /// The model's own chat template in Jinja (`tokenizer.chat_template`), which
    /// [`Tokenizer::render_chat`] renders with the `jinja` feature.
    pub fn chat_template(mut self, source: Option<String>) -> Self {
        self.chat_template = source;
        self
    }

    /// `tokenizer.ggml.bos_token_id`.
    pub fn bos_token_id(mut self, id: Option<TokenId>) -> Self {
        self.bos = id;
        self
    }

    /// `tokenizer.ggml.eos_token_id`.
    pub fn eos_token_id(mut self, id: Option<TokenId>) -> Self {
        self.eos = id;
        self
    }

    /// `tokenizer.ggml.padding_token_id`.
    pub fn padding_token_id(mut self, id: Option<TokenId>) -> Self {
        self.pad = id;
        self
    }

    /// `tokenizer.ggml.add_bos_token` (false for Qwen).
    pub fn add_bos_token(mut self, add: bool) -> Self {
        self.add_bos = add;
        self
    }

    /// When true, a pre-token piece that is itself a token is that token, without BPE (tiktoken's rule, and
    /// llama.cpp's `ignore_merges`). When false (the default, llama.cpp's behaviour for `qwen2` / `qwen35`
    /// and Hugging Face's), only merges build tokens. The two differ on tokens no chain of merges reaches,
    /// such as Qwen3.5's `" بزرگ"` (no split of it is two tokens): tiktoken emits it, merge-rank BPE cannot.
    pub fn ignore_merges(mut self, ignore: bool) -> Self {
        self.ignore_merges = ignore;
        self
    }

    /// Validates everything and builds the lookup tables (≈0.1–0.5 s for a 250k vocabulary).
    ///
    /// # Errors
    /// [`Error::VocabularySize`], [`Error::TokenTypeCount`], [`Error::NotByteLevel`],
    /// [`Error::DuplicateToken`], [`Error::MissingByteToken`], [`Error::InvalidMerge`],
    /// [`Error::SpecialIdOutOfRange`].
    pub fn build(self) -> Result<Tokenizer> {
        let n = self.tokens.len();
        if !(256..(WHOLE as usize)).contains(&n) {
            return Err(Error::VocabularySize { n_tokens: n });
        }
        if self.types.len() != n {
            return Err(Error::TokenTypeCount { n_tokens: n, n_types: self.types.len() });
        }
        for (key, id) in
            [("bos_token_id", self.bos), ("eos_token_id", self.eos), ("padding_token_id", self.pad)]
        {
            if let Some(id) = id
                && id as usize >= n
            {
                return Err(Error::SpecialIdOutOfRange { key, id, n_tokens: n });
            }
        }

        // Token bytes (what decode emits) and the byte-level encoder.
        let mut piece_bytes = Vec::with_capacity(self.tokens.iter().map(String::len).sum());
        let mut piece_offsets = Vec::with_capacity(n + 1);
        piece_offsets.push(0u32);
        let mut encoder: FastMap<Box<[u8]>, u32> = FastMap::default();
        encoder.reserve(n);
        let mut by_text: FastMap<&str, TokenId> = FastMap::default();
        by_text.reserve(n);
        for (i, (text, &ty)) in self.tokens.iter().zip(&self.types).enumerate() {
            let id = i as TokenId;
            match ty {
                TokenType::Normal | TokenType::Byte => {
                    let bytes = byte_level::decode_text(text).map_err(|ch| Error::NotByteLevel {
                        id,
                        text: text.clone(),
                        ch,
                    })?;
                    piece_bytes.extend_from_slice(&bytes);
                    if bytes.is_empty() {
                        // An empty token can never be produced; it decodes to nothing.
                        continue_offsets(&mut piece_offsets, piece_bytes.len(), n)?;
                        continue;
                    }
                    if let Some(first) = encoder.insert(bytes.clone().into_boxed_slice(), id) {
                        return Err(Error::DuplicateToken { first, second: id, bytes });
                    }
                    by_text.insert(text.as_str(), id);
                }
                TokenType::Unused => {}
                TokenType::Unknown | TokenType::Control | TokenType::UserDefined => {
                    piece_bytes.extend_from_slice(text.as_bytes())
                }
            }
            continue_offsets(&mut piece_offsets, piece_bytes.len(), n)?;
        }
        let mut byte_tokens = [0 as TokenId; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = *encoder.get(&[b as u8][..]).ok_or(Error::MissingByteToken { byte: b as u8 })?;
        }

        // Merges. A pair's rank is the rank of the first merge that makes the same token: for vocabularies
        // with one merge per token (Hugging Face files) that is the merge's own index, as in llama.cpp; for
        // merges derived from tiktoken ranks (every split of a token) all splits share the token's rank, and
        // ties go to the leftmost pair, as in tiktoken.
        let mut first_rank = vec![NO_RANK; n];
        let mut merges = PairTable::with_capacity(self.merges.len());
        let mut joined = String::new();
        for (index, merge) in self.merges.iter().enumerate() {
            let invalid = |reason| Error::InvalidMerge { index, merge: merge.clone(), reason };
            // The first space after the first character (llama.cpp: `find(' ', 1)`).
            let first = merge.chars().next().map_or(0, char::len_utf8);
            let split =
                merge[first..].find(' ').ok_or_else(|| invalid("no space between its sides"))? + first;
            let (left, right) = (&merge[..split], &merge[split + 1..]);
            let &l = by_text.get(left).ok_or_else(|| invalid("its left side is no normal token"))?;
            let &r = by_text.get(right).ok_or_else(|| invalid("its right side is no normal token"))?;
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let &result =
                by_text.get(joined.as_str()).ok_or_else(|| invalid("its result is no normal token"))?;
            let rank = Rank::try_from(index).map_err(|_| invalid("too many merges"))?;
            let rank = first_rank[result as usize].min(rank);
            first_rank[result as usize] = rank;
            merges.insert_first(l, r, rank, result);
        }
        drop(by_text);

        let mut types = self.types;
        let mut end_of_generation: Vec<TokenId> = self.eos.into_iter().collect();
        for (i, text) in self.tokens.iter().enumerate() {
            let ty = &mut types[i];
            let fim = FIM_TEXTS.contains(&text.as_str());
            let eog = EOG_TEXTS.contains(&text.as_str()) || FIM_EOG_TEXTS.contains(&text.as_str());
            if (fim || eog) && *ty == TokenType::UserDefined {
                *ty = TokenType::Control;
            }
            if eog && *ty == TokenType::Control {
                end_of_generation.push(i as TokenId);
            }
        }
        end_of_generation.sort_unstable();
        end_of_generation.dedup();

        let specials = Specials::new(&self.tokens, &types);
        let mut tok = Tokenizer {
            pre: self.pre,
            types,
            end_of_generation,
            piece_bytes,
            piece_offsets,
            encoder,
            short_encoder: FastMap::default(),
            byte_tokens,
            merges,
            specials,
            bos: self.bos,
            eos: self.eos,
            pad: self.pad,
            add_bos: self.add_bos,
            ignore_merges: self.ignore_merges,
            chat: crate::chat::ModelTemplate::new(self.chat_template),
        };
        tok.mark_whole_tokens();
        Ok(tok)
    }
}

/// Fill-in-the-middle token texts llama.cpp recognises at load (`llama_vocab::impl::load`) and turns into
/// control tokens when they are not (Qwen3's GGUF has them user-defined): so, as in llama.cpp, they are
/// matched in text only when special text is parsed.
const FIM_TEXTS: [&str; 3] = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"];
/// FIM texts that also end generation in llama.cpp (`special_fim_pad_id`, `_rep_id`, `_sep_id`).
const FIM_EOG_TEXTS: [&str; 3] = ["<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"];
/// Texts that end generation in llama.cpp (its end-of-generation list, the entries Qwen-style vocabularies
/// use); llama.cpp also makes them control tokens.
const EOG_TEXTS: [&str; 4] = ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>"];

/// Longest byte string keyed inline in the short encoder.
const SHORT: usize = 15;

/// `bytes` packed into a `u128` with its length in the last byte, if at most [`SHORT`] bytes.
#[inline(always)]
fn short_key(bytes: &[u8]) -> Option<u128> {
    if bytes.len() > SHORT {
        return None;
    }
    let mut buf = [0u8; 16];
    buf[..bytes.len()].copy_from_slice(bytes);
    buf[15] = bytes.len() as u8;
    Some(u128::from_le_bytes(buf))
}

/// Ends a token's bytes in the decode table.
fn continue_offsets(offsets: &mut Vec<u32>, end: usize, n_tokens: usize) -> Result<()> {
    offsets.push(u32::try_from(end).map_err(|_| Error::VocabularySize { n_tokens })?);
    Ok(())
}

/// One part of a piece during BPE: its token and the merge with the next part.
#[derive(Clone, Copy, Debug)]
struct Part {
    id: TokenId,
    rank: Rank,
    merged: TokenId,
}

/// A merge waiting in [`Tokenizer::merge_long_into`]'s heap; ordered by rank, then position (leftmost first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: Rank,
    left: u32,
    left_id: TokenId,
    right: u32,
    right_id: TokenId,
    merged: TokenId,
}

/// Reused buffers of one encode call.
#[derive(Default)]
pub(crate) struct Scratch {
    parts: Vec<Part>,
}

/// A byte-level BPE tokenizer with the Qwen pre-tokenizers, as llama.cpp runs `tokenizer.ggml.model = gpt2`.
///
/// Build it with [`TokenizerBuilder`] or, with the `gguf` feature, from GGUF metadata. It is immutable and
/// `Sync`: share one across threads.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    pre: PreTokenizer,
    types: Vec<TokenType>,
    piece_bytes: Vec<u8>,
    piece_offsets: Vec<u32>,
    /// Bytes of each normal token → id, with [`WHOLE`] set where the piece alone encodes to the token.
    encoder: FastMap<Box<[u8]>, u32>,
    /// The entries of `encoder` of at most [`SHORT`] bytes, keyed inline (no pointer to follow, no memcmp).
    short_encoder: FastMap<u128, u32>,
    byte_tokens: [TokenId; 256],
    /// (left, right) → (rank, merged token).
    merges: PairTable,
    specials: Specials,
    end_of_generation: Vec<TokenId>,
    bos: Option<TokenId>,
    eos: Option<TokenId>,
    pad: Option<TokenId>,
    add_bos: bool,
    ignore_merges: bool,
    /// The model's chat template, where it has one.
    chat: crate::chat::ModelTemplate,
}

impl Tokenizer {
    /// Sets [`WHOLE`] on every normal token a piece equal to its bytes would encode to, by running BPE on it
    /// (all of them when merges are ignored).
    fn mark_whole_tokens(&mut self) {
        let mut scratch = Scratch::default();
        let mut out = Vec::new();
        let mut whole = vec![self.ignore_merges; self.types.len()];
        if !self.ignore_merges {
            for (bytes, &id) in &self.encoder {
                out.clear();
                self.bpe_into_by_merges(bytes, &mut out, &mut scratch);
                whole[id as usize] = out == [id];
            }
        }
        for v in self.encoder.values_mut() {
            if whole[*v as usize] {
                *v |= WHOLE;
            }
        }
        self.short_encoder.reserve(self.encoder.len());
        self.encoder.retain(|bytes, v| match short_key(bytes) {
            Some(key) => {
                self.short_encoder.insert(key, *v);
                false
            }
            None => true,
        });
        self.encoder.shrink_to_fit();
    }

    /// The encoder value (id, and [`WHOLE`]) of a normal token's bytes.
    #[inline(always)]
    fn encoder_get(&self, bytes: &[u8]) -> Option<u32> {
        match short_key(bytes) {
            Some(key) => self.short_encoder.get(&key).copied(),
            None => self.encoder.get(bytes).copied(),
        }
    }

    /// BPE by merges alone (no whole-piece shortcut).
    fn bpe_into_by_merges(&self, piece: &[u8], out: &mut Vec<TokenId>, scratch: &mut Scratch) {
        match piece {
            [] => {}
            [b] => out.push(self.byte_tokens[*b as usize]),
            _ => self.merge_into(piece, out, scratch),
        }
    }

    /// The pre-tokenizer.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// Renders a conversation to the prompt text (encode it with special-token parsing on) with the model's
    /// own chat template where the tokenizer came with one and the `jinja` feature renders it, and with the
    /// built-in template of its family ([`ChatTemplate::for_pre_tokenizer`]) otherwise: without a template,
    /// with one that does not compile ([`Tokenizer::chat_template_problem`]), or for a conversation the
    /// template refuses (a template's `raise_exception`).
    ///
    /// [`ChatTemplate::for_pre_tokenizer`]: crate::chat::ChatTemplate::for_pre_tokenizer
    pub fn render_chat(
        &self,
        messages: &[crate::chat::Message],
        options: &crate::chat::ChatOptions,
    ) -> String {
        self.chat.render(messages, options).unwrap_or_else(|| {
            crate::chat::ChatTemplate::for_pre_tokenizer(self.pre).render(messages, options)
        })
    }

    /// Why the model's chat template is not used, where it has one that is not: it does not compile, or
    /// this build renders no Jinja (the `jinja` feature).
    pub fn chat_template_problem(&self) -> Option<&str> {
        self.chat.problem()
    }

    /// Number of tokens in the vocabulary (including unused padding entries).
    pub fn n_tokens(&self) -> usize {
        self.types.len()
    }

    /// The type of a token, `None` outside the vocabulary.
    pub fn token_type(&self, id: TokenId) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// `tokenizer.ggml.bos_token_id`.
    pub fn bos_token_id(&self) -> Option<TokenId> {
        self.bos
    }

    /// `tokenizer.ggml.eos_token_id`.
    pub fn eos_token_id(&self) -> Option<TokenId> {
        self.eos
    }

    /// `tokenizer.ggml.padding_token_id`.
    pub fn padding_token_id(&self) -> Option<TokenId> {
        self.pad
    }

    /// `tokenizer.ggml.add_bos_token`: whether a prompt starts with [`Self::bos_token_id`] (the caller adds
    /// it).
    pub fn add_bos_token(&self) -> bool {
        self.add_bos
    }

    /// Whether whole pieces that are tokens skip BPE; see [`TokenizerBuilder::ignore_merges`].
    pub fn ignores_merges(&self) -> bool {
        self.ignore_merges
    }

    /// The tokens that end generation, as llama.cpp's `special_eog_ids`: EOS, `<|im_end|>`, `<|endoftext|>`,
    /// and the FIM pad / repo / file-separator tokens, where present. Sorted.
    pub fn end_of_generation_ids(&self) -> &[TokenId] {
        &self.end_of_generation
    }

    /// Whether a token ends generation; see [`Self::end_of_generation_ids`].
    pub fn is_end_of_generation(&self, id: TokenId) -> bool {
        self.end_of_generation.binary_search(&id).is_ok()
    }

    /// The id of the control or user-defined token with exactly this text (`"<|im_end|>"`).
    pub fn special_token_id(&self, text: &str) -> Option<TokenId> {
        self.specials.id_of(text.as_bytes())
    }

    /// The id of the normal token standing for exactly these bytes.
    pub fn token_id(&self, bytes: &[u8]) -> Option<TokenId> {
        self.encoder_get(bytes).map(|v| v & !WHOLE)
    }

    /// What decoding a token emits: the bytes of a normal token, the text of a control, user-defined or
    /// unknown token, nothing for an unused one (as llama.cpp's `token_to_piece` with `special = true`).
    /// `None` outside the vocabulary.
    pub fn token_to_piece(&self, id: TokenId) -> Option<&[u8]> {
        let i = id as usize;
        let (&start, &end) = (self.piece_offsets.get(i)?, self.piece_offsets.get(i + 1)?);
        Some(&self.piece_bytes[start as usize..end as usize])
    }

    /// Encodes text. With `parse_special`, the text of every control (and unknown) token is that token; the
    /// text of user-defined tokens is matched either way (llama.cpp's `tokenizer_st_partition`: longest token
    /// first). No BOS is added: see [`Self::add_bos_token`].
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<TokenId> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_into(text, parse_special, &mut out);
        out
    }

    /// [`Self::encode`], appending to `out`.
    pub fn encode_into(&self, text: &str, parse_special: bool, out: &mut Vec<TokenId>) {
        let mut scratch = Scratch::default();
        let mut last = 0;
        for (start, end, id) in self.specials.find(text.as_bytes(), parse_special) {
            self.encode_ordinary(&text[last..start], out, &mut scratch);
            out.push(id);
            last = end;
        }
        self.encode_ordinary(&text[last..], out, &mut scratch);
    }

    /// Encodes text with no special-token matching at all.
    fn encode_ordinary(&self, text: &str, out: &mut Vec<TokenId>, scratch: &mut Scratch) {
        for piece in self.pre.split(text) {
            self.bpe_into(piece.as_bytes(), out, scratch);
        }
    }

    /// Encodes one pre-token piece.
    #[inline]
    fn bpe_into(&self, piece: &[u8], out: &mut Vec<TokenId>, scratch: &mut Scratch) {
        if let [b] = piece {
            out.push(self.byte_tokens[*b as usize]);
            return;
        }
        if let Some(v) = self.encoder_get(piece)
            && v & WHOLE != 0
        {
            out.push(v & !WHOLE);
            return;
        }
        self.merge_into(piece, out, scratch);
    }

    #[inline(always)]
    fn pair(&self, left: TokenId, right: TokenId) -> (Rank, TokenId) {
        self.merges.get(left, right)
    }

    /// Merge-rank BPE over the bytes of a piece: repeatedly merge the adjacent pair of lowest rank, the
    /// leftmost on ties (llama.cpp's `llm_tokenizer_bpe_session`, tiktoken's `byte_pair_merge`).
    ///
    // Performance notes: a linear scan for the minimum (as tiktoken) beats a heap for the short pieces that
    // dominate text, but is quadratic: long pieces (runs of CJK or Thai letters, of spaces) take the heap.
    fn merge_into(&self, piece: &[u8], out: &mut Vec<TokenId>, scratch: &mut Scratch) {
        if piece.len() > LONG_PIECE {
            self.merge_long_into(piece, out);
        } else {
            self.scan_merge_into(piece, out, scratch);
        }
    }

    /// [`Self::merge_into`] by a linear scan for the lowest rank at each step.
    fn scan_merge_into(&self, piece: &[u8], out: &mut Vec<TokenId>, scratch: &mut Scratch) {
        let parts = &mut scratch.parts;
        parts.clear();
        parts.extend(piece.iter().map(|&b| Part {
            id: self.byte_tokens[b as usize],
            rank: NO_RANK,
            merged: 0,
        }));
        for i in 0..parts.len() - 1 {
            (parts[i].rank, parts[i].merged) = self.pair(parts[i].id, parts[i + 1].id);
        }
        loop {
            let mut best = NO_RANK;
            let mut at = 0;
            for (i, p) in parts[..parts.len() - 1].iter().enumerate() {
                if p.rank < best {
                    best = p.rank;
                    at = i;
                }
            }
            if best == NO_RANK {
                break;
            }
            parts[at].id = parts[at].merged;
            parts.remove(at + 1);
            if at + 1 < parts.len() {
                (parts[at].rank, parts[at].merged) = self.pair(parts[at].id, parts[at + 1].id);
            } else {
                parts[at].rank = NO_RANK;
            }
            if at > 0 {
                (parts[at - 1].rank, parts[at - 1].merged) = self.pair(parts[at - 1].id, parts[at].id);
            }
            if parts.len() == 1 {
                break;
            }
        }
        out.extend(parts.iter().map(|p| p.id));
    }

    /// [`Self::merge_into`] in O(n log n): a linked list of parts and a min-heap of candidate merges ordered
    /// by (rank, position), entries checked for staleness when popped.
    fn merge_long_into(&self, piece: &[u8], out: &mut Vec<TokenId>) {
        const NONE: u32 = u32::MAX;
        let n = piece.len();
        let mut ids: Vec<TokenId> = piece.iter().map(|&b| self.byte_tokens[b as usize]).collect();
        let mut next: Vec<u32> = (1..=n as u32).collect();
        next[n - 1] = NONE;
        let mut prev: Vec<u32> = (0..n as u32).map(|i| i.wrapping_sub(1)).collect();
        prev[0] = NONE;
        let mut alive = vec![true; n];
        let mut heap: BinaryHeap<Reverse<Candidate>> = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<Reverse<Candidate>>, ids: &[TokenId], l: u32, r: u32| {
            let (rank, merged) = self.pair(ids[l as usize], ids[r as usize]);
            if rank != NO_RANK {
                heap.push(Reverse(Candidate {
                    rank,
                    left: l,
                    left_id: ids[l as usize],
                    right: r,
                    right_id: ids[r as usize],
                    merged,
                }));
            }
        };
        for i in 0..n as u32 - 1 {
            push(&mut heap, &ids, i, i + 1);
        }
        while let Some(Reverse(Candidate {
            left: l, left_id: lid, right: r, right_id: rid, merged, ..
        })) = heap.pop()
        {
            let (lu, ru) = (l as usize, r as usize);
            if !alive[lu] || !alive[ru] || next[lu] != r || ids[lu] != lid || ids[ru] != rid {
                continue;
            }
            ids[lu] = merged;
            alive[ru] = false;
            next[lu] = next[ru];
            if next[ru] != NONE {
                prev[next[ru] as usize] = l;
                push(&mut heap, &ids, l, next[ru]);
            }
            if prev[lu] != NONE {
                push(&mut heap, &ids, prev[lu], l);
            }
        }
        let mut i = 0;
        while i != NONE {
            out.push(ids[i as usize]);
            i = next[i as usize];
        }
    }

    /// The bytes the tokens stand for (see [`Self::token_to_piece`]); ids outside the vocabulary add nothing.
    pub fn decode(&self, ids: &[TokenId]) -> Vec<u8> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.token_to_piece(id).unwrap_or_default());
        }
        out
    }

    /// [`Self::decode`] as text, invalid UTF-8 replaced by U+FFFD.
    pub fn decode_lossy(&self, ids: &[TokenId]) -> String {
        String::from_utf8_lossy(&self.decode(ids)).into_owned()
    }

    /// A decoder for generated tokens that emits only complete UTF-8.
    pub fn decode_stream(&self) -> DecodeStream<'_> {
        DecodeStream::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(merges: &[&str], extra: &[&str]) -> Result<Tokenizer> {
        let mut tokens: Vec<String> = (0..=255u8).map(crate::byte_level_text).collect();
        tokens.extend(extra.iter().map(|s| s.to_string()));
        let types = vec![TokenType::Normal; tokens.len()];
        TokenizerBuilder::new(
            PreTokenizer::Qwen2,
            tokens,
            types,
            merges.iter().map(|s| s.to_string()).collect(),
        )
        .build()
    }

    #[test]
    fn merges_lowest_rank_first_leftmost_on_ties() {
        // "aaa": (a, a) twice at equal rank: the leftmost merges, then "aa a".
        let t = tiny(&["a a", "aa a"], &["aa", "aaa"]).unwrap();
        assert_eq!(t.encode("aaa", false), [257]);
        // "aaaa": a a a a → aa a a → aa aa (rank 0 beats rank 1).
        assert_eq!(t.encode("aaaa", false), [256, 256]);
        let t = tiny(&["a a", "a aa"], &["aa", "aaa"]).unwrap();
        assert_eq!(t.encode("aaa", false), [256, u32::from(b'a')]);
    }

    #[test]
    fn long_pieces_merge_as_short_ones() {
        let t =
            tiny(&["a a", "aa a", "aa aa", "b a", "ba aa"], &["aa", "aaa", "aaaa", "ba", "baaa"]).unwrap();
        let mut scratch = Scratch::default();
        for text in ["a".repeat(97), "ba".repeat(60), format!("{}b{}", "a".repeat(70), "a".repeat(99))] {
            let (mut scan, mut heap) = (Vec::new(), Vec::new());
            t.scan_merge_into(text.as_bytes(), &mut scan, &mut scratch);
            t.merge_long_into(text.as_bytes(), &mut heap);
            assert_eq!(scan, heap, "{text}");
        }
    }

    #[test]
    fn empty_tokens_are_never_produced() {
        let t = tiny(&[], &[""]).unwrap();
        assert_eq!(t.encode("", true), Vec::<u32>::new());
        assert_eq!(t.token_to_piece(256), Some(&b""[..]));
    }

    #[test]
    fn tokenizer_is_shared_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Tokenizer>();
    }

    #[test]
    fn unreachable_token_needs_ignore_merges() {
        let mut tokens: Vec<String> = (0..=255u8).map(crate::byte_level_text).collect();
        tokens.push("abc".into());
        let types = vec![TokenType::Normal; 257];
        let b = TokenizerBuilder::new(PreTokenizer::Qwen2, tokens, types, vec![]);
        assert_eq!(b.clone().build().unwrap().encode("abc", false), [97, 98, 99]);
        assert_eq!(b.ignore_merges(true).build().unwrap().encode("abc", false), [256]);
    }

    #[test]
    fn invalid_parts_are_refused() {
        assert!(matches!(tiny(&["a b"], &[]), Err(Error::InvalidMerge { index: 0, .. })));
        assert!(matches!(tiny(&["ab"], &["ab"]), Err(Error::InvalidMerge { index: 0, .. })));
        assert!(matches!(tiny(&[], &["a b"]), Err(Error::NotByteLevel { id: 256, ch: ' ', .. })));
        assert!(matches!(tiny(&[], &["a"]), Err(Error::DuplicateToken { first: 97, second: 256, .. })));
        let tokens: Vec<String> = (0..=254u8).map(crate::byte_level_text).chain(["[PAD]".into()]).collect();
        let mut types = vec![TokenType::Normal; 256];
        types[255] = TokenType::Unused;
        assert!(matches!(
            TokenizerBuilder::new(PreTokenizer::Qwen2, tokens.clone(), types.clone(), vec![]).build(),
            Err(Error::MissingByteToken { byte: 255 })
        ));
        assert!(matches!(
            TokenizerBuilder::new(PreTokenizer::Qwen2, tokens, types[1..].to_vec(), vec![]).build(),
            Err(Error::TokenTypeCount { n_tokens: 256, n_types: 255 })
        ));
        let t = tiny(&[], &[]).unwrap();
        assert_eq!(t.n_tokens(), 256);
        let tokens: Vec<String> = (0..=255u8).map(crate::byte_level_text).collect();
        assert!(matches!(
            TokenizerBuilder::new(PreTokenizer::Qwen2, tokens, vec![TokenType::Normal; 256], vec![])
                .bos_token_id(Some(256))
                .build(),
            Err(Error::SpecialIdOutOfRange { key: "bos_token_id", id: 256, n_tokens: 256 })
        ));
    }
}
