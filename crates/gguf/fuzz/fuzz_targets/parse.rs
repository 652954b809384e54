//! Fuzzes the GGUF reader: any input must give a header or a typed error, never a panic, hang or huge
//! allocation (libFuzzer's -rss_limit_mb and -timeout catch the last two).
#![no_main]

use diskformer_gguf::{Gguf, Header, PrefixParse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(gguf) = Gguf::from_bytes(data) {
        for t in gguf.tensors() {
            let bytes = gguf.tensor_data(&t.name).expect("listed tensor has data");
            assert_eq!(bytes.len() as u64, t.n_bytes);
        }
        // A parsed header's own bytes must parse as a complete header.
        let header_len = (gguf.header().data_offset as usize).min(data.len());
        match Header::parse_prefix(&data[..header_len]) {
            Ok(PrefixParse::Complete(h)) => assert_eq!(&*h, gguf.header()),
            other => panic!("the header's own bytes did not parse alone: {other:?}"),
        }
    }
    let _ = Header::parse_prefix(&data[..data.len() / 2]);
});
