//! Entry points into the record codec for the criterion benchmarks in `event_base_test`.
//! Not part of the API: the format is specified in `record_codec`, and nothing outside this
//! workspace should depend on these functions.

use std::sync::Arc;

use event_base_core::EMessage;

use super::persistent_wal::DEFAULT_MAX_RECORD_BYTES;
use super::record_codec::{encode, read_frame, Entry, Frame};

/// Appends the `Append` record of `message` (frame header, CRC and body) to `out`.
pub fn encode_append(message: &Arc<EMessage>, out: &mut Vec<u8>) {
    encode(&Entry::Append(message.clone()), out);
}

/// Decodes the record at the start of `bytes` as recovery does (CRC checked, message
/// rebuilt); returns the frame's length, or `None` if it is torn or corrupt.
pub fn decode(bytes: &[u8]) -> Option<usize> {
    match read_frame(bytes, DEFAULT_MAX_RECORD_BYTES) {
        Frame::Record(_, len) => Some(len),
        Frame::Torn | Frame::Corrupt(_) => None,
    }
}
