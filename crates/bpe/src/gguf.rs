//! Building a [`Tokenizer`] from GGUF metadata (feature `gguf`).

use diskformer_gguf::{Gguf, Header, Metadata};

use crate::{Error, PreTokenizer, Result, TokenId, TokenType, Tokenizer, TokenizerBuilder};

const MODEL: &str = "tokenizer.ggml.model";
const PRE: &str = "tokenizer.ggml.pre";
const TOKENS: &str = "tokenizer.ggml.tokens";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";
const BOS: &str = "tokenizer.ggml.bos_token_id";
const EOS: &str = "tokenizer.ggml.eos_token_id";
const PAD: &str = "tokenizer.ggml.padding_token_id";
const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const CHAT_TEMPLATE: &str = "tokenizer.chat_template";

fn gguf_err(key: &str) -> impl FnOnce(diskformer_gguf::Error) -> Error + '_ {
    move |source| Error::Gguf { key: key.to_owned(), source }
}

/// An optional token id (any non-negative integer type).
fn optional_id(md: &Metadata, key: &'static str) -> Result<Option<TokenId>> {
    if md.get(key).is_none() {
        return Ok(None);
    }
    let id = md.get_uint(key).map_err(gguf_err(key))?;
    // Out of u32: certainly outside the vocabulary; the builder reports it.
    Ok(Some(TokenId::try_from(id).unwrap_or(TokenId::MAX)))
}

impl TokenizerBuilder {
    /// A builder holding `tokenizer.ggml.{model, pre, tokens, token_type, merges, bos_token_id,
    /// eos_token_id, padding_token_id, add_bos_token}` and `tokenizer.chat_template`. Missing `token_type`
    /// means all normal; missing ids and template are `None`; a missing `add_bos_token` is false. Merges are ranked as llama.cpp ranks them
    /// ([`TokenizerBuilder::ignore_merges`] off).
    ///
    /// # Errors
    /// [`Error::UnsupportedModel`] for a model other than `gpt2`, [`Error::UnsupportedPreTokenizer`] for a
    /// `pre` other than `qwen2` / `qwen35`, [`Error::Gguf`] for a missing or mistyped key,
    /// [`Error::UnknownTokenType`].
    pub fn from_metadata(md: &Metadata) -> Result<Self> {
        let model = md.get_str(MODEL).map_err(gguf_err(MODEL))?;
        if model != "gpt2" {
            return Err(Error::UnsupportedModel { model: model.to_owned() });
        }
        let pre = PreTokenizer::from_name(md.get_str(PRE).map_err(gguf_err(PRE))?)?;
        let tokens = md.get_str_array(TOKENS).map_err(gguf_err(TOKENS))?.to_vec();
        let types = match md.get(TOKEN_TYPE) {
            None => vec![TokenType::Normal; tokens.len()],
            Some(_) => {
                TokenType::from_gguf_values(md.get_i32_array(TOKEN_TYPE).map_err(gguf_err(TOKEN_TYPE))?)?
            }
        };
        let merges = md.get_str_array(MERGES).map_err(gguf_err(MERGES))?.to_vec();
        let add_bos = match md.get(ADD_BOS) {
            None => false,
            Some(_) => md.get_bool(ADD_BOS).map_err(gguf_err(ADD_BOS))?,
        };
        let chat_template = match md.get(CHAT_TEMPLATE) {
            None => None,
            Some(_) => Some(md.get_str(CHAT_TEMPLATE).map_err(gguf_err(CHAT_TEMPLATE))?.to_owned()),
        };
        Ok(TokenizerBuilder::new(pre, tokens, types, merges)
            .chat_template(chat_template)
            .bos_token_id(optional_id(md, BOS)?)
            .eos_token_id(optional_id(md, EOS)?)
            .padding_token_id(optional_id(md, PAD)?)
            .add_bos_token(add_bos))
    }
}

impl Tokenizer {
    /// The tokenizer of GGUF metadata, as llama.cpp builds it: [`TokenizerBuilder::from_metadata`], then
    /// [`TokenizerBuilder::build`]. Use the builder to set [`TokenizerBuilder::ignore_merges`] (tiktoken's ids).
    ///
    /// # Errors
    /// As [`TokenizerBuilder::from_metadata`] and [`TokenizerBuilder::build`].
    pub fn from_metadata(md: &Metadata) -> Result<Self> {
        TokenizerBuilder::from_metadata(md)?.build()
    }

    /// [`Self::from_metadata`] of a parsed header (e.g. `Header::parse_prefix` of a model's first megabytes).
    ///
    /// # Errors
    /// As [`Self::from_metadata`].
    pub fn from_header(header: &Header) -> Result<Self> {
        Self::from_metadata(&header.metadata)
    }

    /// [`Self::from_metadata`] of an opened GGUF (no tensors needed).
    ///
    /// # Errors
    /// As [`Self::from_metadata`].
    pub fn from_gguf<B: AsRef<[u8]>>(gguf: &Gguf<B>) -> Result<Self> {
        Self::from_metadata(gguf.metadata())
    }
}
