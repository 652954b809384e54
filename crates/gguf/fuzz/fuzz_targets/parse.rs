//! Fuzzes the GGUF reader: any input must give a header or a typed error, never a panic, hang or huge
//! allocation (libFuzzer's -rss_limit_mb and -timeout catch the last two); every tensor of a type the
//! engine dequantises must dequantise.
#![no_main]

use diskformer_gguf::{Gguf, Header, PrefixParse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(gguf) = Gguf::from_bytes(data) {
        for t in gguf.tensors() {
            let bytes = gguf.tensor_data(&t.name).expect("listed tensor has data");
            assert_eq!(bytes.len() as u64, t.n_bytes);
            // Every type the engine dequantises takes any bytes of a listed tensor.
            if t.ty.dequantizable() {
                let mut out = vec![0f32; t.n_elements as usize];
                diskformer_gguf::dequantize(t.ty, bytes, &mut out).expect("a listed tensor dequantises");
            }
        }
        // A parsed header's own bytes must parse as a complete header.
        let header_len = (gguf.header().data_offset as usize).min(data.len());
        match Header::parse_prefix(&data[..header_len]) {
            // Compared through Debug text: a NaN value is not equal to itself under PartialEq.
            Ok(PrefixParse::Complete(h)) => {
                let g = gguf.header();
                assert_eq!((h.data_offset, &h.tensors), (g.data_offset, &g.tensors));
                let text = |m: &diskformer_gguf::Metadata| m.iter().map(|(k, v)| format!("{k}={v:?}")).collect::<Vec<_>>();
                assert_eq!(text(&h.metadata), text(&g.metadata));
            }
            other => panic!("the header's own bytes did not parse alone: {other:?}"),
        }
    }
    let _ = Header::parse_prefix(&data[..data.len() / 2]);
});
