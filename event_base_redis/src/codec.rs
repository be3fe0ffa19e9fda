//! How a message is written in a stream entry, and how entry ids become [`Receipt`]s.
//!
//! An entry has two fields: `m`, the message as JSON with an empty payload, and `p`, the
//! payload's bytes as they are (no base64, no JSON array of numbers). A dead letter is one
//! field `d`, the [`DeadLetterMessage`] as JSON.

use event_base_core::backend::Receipt;
use event_base_core::{DeadLetterMessage, EMessage, MessagePayload};
use redis::Value;

/// The dead-letter field.
pub(crate) const DEAD: &str = "d";

/// Largest `m` field decoded: far above any message event_base writes (ids, topics and
/// metadata are small), so only foreign data reaches it.
const MAX_MESSAGE_FIELD: usize = 1 << 20;

/// The `m` field of `message`: it as JSON, without its payload.
pub(crate) fn message_field(message: &EMessage) -> Vec<u8> {
    let mut head = message.clone();
    head.payload = MessagePayload::default();
    // EMessage's Serialize does not fail (string keys, no custom impls).
    serde_json::to_vec(&head).unwrap_or_default()
}

/// The message of an entry with fields `m` and `p`.
pub(crate) fn decode_message(fields: &[(Vec<u8>, Value)]) -> Result<EMessage, String> {
    let mut head = None;
    let mut payload = None;
    for (name, value) in fields {
        match name.as_slice() {
            b"m" => head = Some(bytes_of(value).ok_or("field `m` is not a string")?),
            b"p" => payload = Some(bytes_of(value).ok_or("field `p` is not a string")?),
            _ => {}
        }
    }
    let head = head.ok_or("no field `m`")?;
    if head.len() > MAX_MESSAGE_FIELD {
        return Err(format!(
            "field `m` is {} bytes, over {MAX_MESSAGE_FIELD}",
            head.len()
        ));
    }
    let mut message: EMessage =
        serde_json::from_slice(head).map_err(|e| format!("field `m`: {e}"))?;
    message.payload = MessagePayload::from(payload.ok_or("no field `p`")?.to_vec());
    Ok(message)
}

/// The `d` field of a dead letter.
pub(crate) fn dead_field(dead: &DeadLetterMessage) -> Vec<u8> {
    serde_json::to_vec(dead).unwrap_or_default()
}

/// The dead letter of an entry with field `d`.
pub(crate) fn decode_dead(fields: &[(Vec<u8>, Value)]) -> Result<DeadLetterMessage, String> {
    let d = fields
        .iter()
        .find(|(n, _)| n.as_slice() == DEAD.as_bytes())
        .and_then(|(_, v)| bytes_of(v))
        .ok_or("no field `d`")?;
    serde_json::from_slice(d).map_err(|e| format!("field `d`: {e}"))
}

/// The bytes of a string reply.
pub(crate) fn bytes_of(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// The receipt of entry id `ms-seq`.
pub(crate) fn receipt(id: &str) -> Option<Receipt> {
    let (ms, seq) = id.split_once('-')?;
    Some(Receipt {
        hi: ms.parse().ok()?,
        lo: seq.parse().ok()?,
    })
}

/// The entry id of a receipt.
pub(crate) fn entry_id(r: &Receipt) -> String {
    format!("{}-{}", r.hi, r.lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_with_its_payload_kept_as_bytes() {
        let m = EMessage::standard("orders", vec![0u8, 159, 146, 150]).with_id("o-1");
        let fields = vec![
            (b"m".to_vec(), Value::BulkString(message_field(&m))),
            (b"p".to_vec(), Value::BulkString(m.payload.0.to_vec())),
        ];
        assert!(!String::from_utf8_lossy(&message_field(&m)).contains("159"));
        assert_eq!(decode_message(&fields).unwrap(), m);
    }

    #[test]
    fn foreign_entries_are_errors_not_panics() {
        assert!(decode_message(&[]).is_err());
        let junk = vec![
            (b"m".to_vec(), Value::BulkString(b"{not json".to_vec())),
            (b"p".to_vec(), Value::BulkString(vec![])),
        ];
        assert!(decode_message(&junk).is_err());
        let no_payload = vec![(
            b"m".to_vec(),
            Value::BulkString(message_field(&EMessage::standard("t", vec![]))),
        )];
        assert!(decode_message(&no_payload).is_err());
        assert!(decode_dead(&[(b"d".to_vec(), Value::Int(3))]).is_err());
    }

    #[test]
    fn entry_ids_and_receipts_convert_both_ways() {
        let r = receipt("1700000000000-7").unwrap();
        assert_eq!((r.hi, r.lo), (1_700_000_000_000, 7));
        assert_eq!(entry_id(&r), "1700000000000-7");
        assert!(receipt("x-1").is_none());
        assert!(receipt("17").is_none());
    }
}
