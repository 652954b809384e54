//! A request body of any bytes, as `diskformer serve` reads it: the first byte picks the endpoint (even:
//! `/v1/chat/completions`, odd: `/v1/completions`), the rest is the body. It either becomes a prompt and
//! generation options or is refused with a 400 whose JSON body names what was wrong; never a panic. A body
//! that parses is a JSON object.
#![no_main]

use diskformer::api::{ApiError, ChatRequest, CompletionRequest};
use libfuzzer_sys::fuzz_target;

fn refused(e: ApiError) {
    assert_eq!(e.status, 400, "{e:?}");
    assert!(!e.message.is_empty());
    let body = e.body();
    assert!(body["error"]["message"].is_string(), "{body}");
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    let common = if which % 2 == 0 {
        match ChatRequest::parse(body) {
            Ok(r) => {
                if let Err(e) = r.conversation() {
                    refused(e);
                }
                r.common
            }
            Err(e) => return refused(e),
        }
    } else {
        match CompletionRequest::parse(body) {
            Ok(r) => r.common,
            Err(e) => return refused(e),
        }
    };
    assert!(serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| v.is_object()));
    if let Err(e) = common.asked(256) {
        refused(e);
    }
});
