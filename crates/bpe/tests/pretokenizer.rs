//! Protects the hand-written pre-tokenizers: they split exactly as the regex they replace (`fancy-regex` on
//! the tokenizer.json pattern), on the corpus and on generated text rich in the characters the pattern cares
//! about.

mod common;

use diskformer_bpe::PreTokenizer;
use proptest::prelude::*;

const BOTH: [PreTokenizer; 2] = [PreTokenizer::Qwen2, PreTokenizer::Qwen35];

fn assert_same(pre: PreTokenizer, text: &str) {
    let ours: Vec<&str> = pre.split(text).collect();
    let regex = pre.split_regex(text);
    if ours != regex {
        let k = ours.iter().zip(&regex).position(|(a, b)| a != b).unwrap_or(ours.len().min(regex.len()));
        panic!(
            "{pre:?} differs at piece {k}: ours {:?}, regex {:?}",
            &ours[k..(k + 3).min(ours.len())],
            &regex[k..(k + 3).min(regex.len())]
        );
    }
}

#[test]
fn corpus_splits_as_the_regex() {
    for pre in BOTH {
        for doc in common::corpus() {
            assert_same(pre, doc);
        }
    }
}

/// Characters from every class the patterns distinguish, weighted towards the tricky ones.
fn arbitrary_pattern_char() -> impl Strategy<Value = char> {
    let spaces_and_punctuation = vec![
        ' ', ' ', '\t', '\n', '\r', '\u{b}', '\u{c}', '\u{85}', '\u{a0}', '\u{2028}', '\u{3000}', '\u{200b}',
        '\u{feff}', '\'', '’', '.', ',', '!', '<', '|', '>', '_', '-', '#', '$',
    ];
    let contraction_letters = vec![
        's', 'S', 't', 'T', 'r', 'R', 'e', 'E', 'v', 'V', 'm', 'M', 'l', 'L', 'd', 'D', 'ſ', 'K', 'x', 'é',
        'ß',
    ];
    let numbers = vec!['0', '7', '٣', '१', '²', '½', 'Ⅻ', '〇', '𝟘'];
    let marks = vec![
        '\u{300}',
        '\u{301}',
        '\u{93f}',
        '\u{94d}',
        '\u{e31}',
        '\u{5b4}',
        '\u{20dd}',
        '\u{fe0f}',
        '\u{200d}',
        '\u{1f3fd}',
    ];
    let letters = vec!['日', 'ก', 'न', 'ب', 'д', 'α', 'ㄱ', '한', '😀', '👍', '\u{1f1ef}'];
    prop_oneof![
        3 => prop::sample::select(spaces_and_punctuation),
        2 => prop::sample::select(contraction_letters),
        2 => prop::sample::select(numbers),
        2 => prop::sample::select(marks),
        2 => prop::sample::select(letters),
        1 => any::<char>(),
    ]
}

fn arbitrary_pattern_text() -> impl Strategy<Value = String> {
    prop::collection::vec(arbitrary_pattern_char(), 0..48).prop_map(|cs| cs.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn generated_text_splits_as_the_regex(text in arbitrary_pattern_text()) {
        for pre in BOTH {
            assert_same(pre, &text);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn any_unicode_splits_as_the_regex(text in any::<String>()) {
        for pre in BOTH {
            assert_same(pre, &text);
        }
    }
}
