//! The byte format of one `PersistentWal` record, and its encoder and decoder.
//!
//! All integers are little-endian. A record on disk is a frame:
//!
//! ```text
//! offset  size  field
//! 0       4     len    u32: length of `body` in bytes (at least 18, at most the WAL's limit)
//! 4       4     crc    u32: CRC-32 (IEEE, as crc32fast computes it) of `body`
//! 8       len   body
//!
//! body:
//! 0       1     format version (4)
//! 1       1     kind
//! 2       4+n   message id: str (1 to 255 bytes of UTF-8, the text of `EMessage::id`)
//! 6+n     ..    kind-specific fields
//! ```
//!
//! Version 1, written before message ids became text, had the id as its 16 UUID bytes at
//! offset 2 (and `causation_id` as 16 bytes too). It is still read: its ids come back as the
//! UUIDs' hyphenated text, so a log written by an older build replays unchanged. Version 2 is
//! version 3 without the `handlers` of `Failed` and `Snapshot` records (they read as none)
//! and without the `at` of `Complete` records (read as unknown). Version 3 is version 4
//! without a message's `headers` (they read as none).
//! New records are always version 4; a log may hold all four.
//!
//! | kind | name | fields after the id | effect on replay |
//! |---|---|---|---|
//! | 1 | Append | message | record is `Pending` |
//! | 2 | Processing | — | record is `Processing` |
//! | 3 | Complete | at u64 (version 3 on) | record is gone; `at` is when it completed |
//! | 4 | Retry | message | record is `Pending` with the new `attempts`/`deliver_at` |
//! | 5 | Failed | died_at u64, reason, handlers, message | record is a dead letter |
//! | 6 | Cancel | — | record is gone (a refused send) |
//! | 7 | Purge | — | dead letter removed |
//! | 8 | Snapshot | state u8, died_at u64, reason, handlers, message | record is as given (written by compaction) |
//! | 9 | CompleteWith | at u64, count u32, then count × (id str, message) | record is gone (completed at `at`), and each message is `Pending`: a handler's completion with its outbox, all or nothing |
//!
//! A `message` is: topic (str), payload (bytes), created_at (u64 ns since the Unix epoch),
//! trace_id (opt str), correlation_id (opt str), causation_id (opt str), source (opt str),
//! attempts u32, delivery mode (u8: 0 Standard, 1 Repeated, 2 Broadcast; then u32 n),
//! consumed_count u32, deliver_at (opt u64 ns), to_worker (opt str), version u32, and
//! (version 4 on) headers: a u32 count then that many (name str, value str).
//! `str`/`bytes` are a u32 length then the bytes; `opt` is a u8 flag (0 absent, 1 present)
//! then the value. A reason is a u8 tag (0 Explicit, 1 MaxRetriesExceeded, 2 Timeout,
//! 3 NoHandler, 4 UnknownWorker + str, 5 Other + str). `handlers` (version 3 on) is a u32
//! count then that many str: the handlers whose copy died.
//!
//! Decoding checks every length against the bytes actually present, so a corrupt length can
//! never make the decoder read out of bounds or allocate more than the record holds.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use event_base_core::backend::WalRecordState;
use event_base_core::{
    DeadReason, DeliveryMode, EMessage, MessageHeaders, MessageMetadata, MessagePayload,
    MessageTopic,
};
use uuid::Uuid;

use crate::record_id::RecordId;

/// Format version written in every record body.
pub(crate) const FORMAT_VERSION: u8 = 4;
/// Without a message's headers; still read.
const FORMAT_V3: u8 = 3;
/// Ids as text, dead letters without their handlers; still read.
const FORMAT_V2: u8 = 2;
/// The first format (ids as 16 UUID bytes), still read.
const FORMAT_V1: u8 = 1;
/// Bytes of the frame header (len + crc).
pub(crate) const FRAME_HEADER: usize = 8;
/// Smallest valid body of either version: version, kind, and a one-byte id with its length.
pub(crate) const MIN_BODY: usize = 7;
/// Longest id a record may hold (`event_base_core::constant::MAX_ID_BYTES`).
const MAX_ID: usize = event_base_core::constant::MAX_ID_BYTES;

/// One WAL record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entry {
    Append(Arc<EMessage>),
    Processing(RecordId),
    /// The record completed at the given time (`UNIX_EPOCH`: unknown, before version 3).
    Complete(RecordId, SystemTime),
    Retry(Arc<EMessage>),
    Failed {
        message: Arc<EMessage>,
        reason: DeadReason,
        died_at: SystemTime,
        handlers: Vec<String>,
    },
    Cancel(RecordId),
    Purge(RecordId),
    Snapshot {
        message: Arc<EMessage>,
        state: WalRecordState,
        reason: Option<DeadReason>,
        at: SystemTime,
        handlers: Vec<String>,
    },
    /// A completion and the messages its handler's outbox held, in one record.
    CompleteWith {
        id: RecordId,
        at: SystemTime,
        messages: Vec<Arc<EMessage>>,
    },
}

impl Entry {
    pub(crate) fn id(&self) -> &str {
        match self {
            Entry::Append(m) | Entry::Retry(m) => &m.id,
            Entry::Failed { message, .. } | Entry::Snapshot { message, .. } => &message.id,
            Entry::Processing(id)
            | Entry::Complete(id, _)
            | Entry::CompleteWith { id, .. }
            | Entry::Cancel(id)
            | Entry::Purge(id) => id.as_str(),
        }
    }

    /// The record's id as the writer keys it (shared with the message where there is one).
    pub(crate) fn record_id(&self) -> RecordId {
        match self {
            Entry::Append(m) | Entry::Retry(m) => RecordId::Message(m.clone()),
            Entry::Failed { message, .. } | Entry::Snapshot { message, .. } => {
                RecordId::Message(message.clone())
            }
            Entry::Processing(id)
            | Entry::Complete(id, _)
            | Entry::CompleteWith { id, .. }
            | Entry::Cancel(id)
            | Entry::Purge(id) => id.clone(),
        }
    }

    fn kind(&self) -> u8 {
        match self {
            Entry::Append(_) => 1,
            Entry::Processing(_) => 2,
            Entry::Complete(..) => 3,
            Entry::Retry(_) => 4,
            Entry::Failed { .. } => 5,
            Entry::Cancel(_) => 6,
            Entry::Purge(_) => 7,
            Entry::Snapshot { .. } => 8,
            Entry::CompleteWith { .. } => 9,
        }
    }

    /// Whether the record carries the whole message (it becomes the message's anchor: the
    /// segment holding it must be kept while the message is live or dead).
    pub(crate) fn is_anchor(&self) -> bool {
        matches!(
            self,
            Entry::Append(_) | Entry::Retry(_) | Entry::Failed { .. } | Entry::Snapshot { .. }
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// Appends the framed record to `out`.
pub(crate) fn encode(entry: &Entry, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER]);
    out.push(FORMAT_VERSION);
    out.push(entry.kind());
    put_bytes(out, entry.id().as_bytes());
    match entry {
        Entry::Append(m) | Entry::Retry(m) => put_message(out, m),
        Entry::Failed {
            message,
            reason,
            died_at,
            handlers,
        } => {
            put_u64(out, nanos(*died_at));
            put_reason(out, reason);
            put_handlers(out, handlers);
            put_message(out, message);
        }
        Entry::Snapshot {
            message,
            state,
            reason,
            at,
            handlers,
        } => {
            out.push(state_tag(*state));
            put_u64(out, nanos(*at));
            put_reason(out, reason.as_ref().unwrap_or(&DeadReason::Explicit));
            put_handlers(out, handlers);
            put_message(out, message);
        }
        Entry::Complete(_, at) => put_u64(out, nanos(*at)),
        Entry::CompleteWith { at, messages, .. } => {
            put_u64(out, nanos(*at));
            put_u32(out, messages.len() as u32);
            for m in messages {
                put_bytes(out, m.id.as_bytes());
                put_message(out, m);
            }
        }
        Entry::Processing(_) | Entry::Cancel(_) | Entry::Purge(_) => {}
    }
    let body_len = (out.len() - start - FRAME_HEADER) as u32;
    let crc = crc32fast::hash(&out[start + FRAME_HEADER..]);
    out[start..start + 4].copy_from_slice(&body_len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(u64::MAX as u128) as u64)
        .unwrap_or(0)
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

fn put_opt_str(out: &mut Vec<u8>, s: &Option<String>) {
    match s {
        Some(s) => {
            out.push(1);
            put_bytes(out, s.as_bytes());
        }
        None => out.push(0),
    }
}

fn state_tag(s: WalRecordState) -> u8 {
    match s {
        WalRecordState::Pending => 0,
        WalRecordState::Processing => 1,
        WalRecordState::Complete => 2,
        WalRecordState::Failed => 3,
    }
}

fn put_reason(out: &mut Vec<u8>, r: &DeadReason) {
    match r {
        DeadReason::Explicit => out.push(0),
        DeadReason::MaxRetriesExceeded => out.push(1),
        DeadReason::Timeout => out.push(2),
        DeadReason::NoHandler => out.push(3),
        DeadReason::UnknownWorker(w) => {
            out.push(4);
            put_bytes(out, w.as_bytes());
        }
        DeadReason::Other(s) => {
            out.push(5);
            put_bytes(out, s.as_bytes());
        }
    }
}

fn put_handlers(out: &mut Vec<u8>, handlers: &[String]) {
    put_u32(out, handlers.len() as u32);
    for h in handlers {
        put_bytes(out, h.as_bytes());
    }
}

fn put_message(out: &mut Vec<u8>, m: &EMessage) {
    put_bytes(out, m.topic.0.as_bytes());
    put_bytes(out, &m.payload.0);
    put_u64(out, nanos(m.metadata.created_at));
    put_opt_str(out, &m.metadata.trace_id);
    put_opt_str(out, &m.metadata.correlation_id);
    put_opt_str(out, &m.metadata.causation_id);
    put_opt_str(out, &m.metadata.source);
    put_u32(out, m.attempts);
    match m.delivery_mode {
        DeliveryMode::Standard => {
            out.push(0);
            put_u32(out, 0);
        }
        DeliveryMode::Repeated(n) => {
            out.push(1);
            put_u32(out, n);
        }
        DeliveryMode::Broadcast => {
            out.push(2);
            put_u32(out, 0);
        }
    }
    put_u32(out, m.consumed_count);
    match m.deliver_at {
        Some(t) => {
            out.push(1);
            put_u64(out, nanos(t));
        }
        None => out.push(0),
    }
    put_opt_str(out, &m.to_worker);
    put_u32(out, m.version);
    put_u32(out, m.headers.len() as u32);
    for (name, value) in m.headers.iter() {
        put_bytes(out, name.as_bytes());
        put_bytes(out, value.as_bytes());
    }
}

/// An upper bound of the body length of an `Append`/`Retry` record for `m` (exact but for
/// the fixed part, which it rounds up), so a sender can be refused before anything is written.
pub(crate) fn message_body_bound(m: &EMessage) -> usize {
    let opt = |s: &Option<String>| 5 + s.as_ref().map_or(0, String::len);
    2 + 4 + m.id.len() // version, kind, id
        + 4 + m.topic.0.len()
        + 4 + m.payload.0.len()
        + 8
        + opt(&m.metadata.trace_id)
        + opt(&m.metadata.correlation_id)
        + opt(&m.metadata.causation_id)
        + opt(&m.metadata.source)
        + 4 + 5 + 4 + 9
        + opt(&m.to_worker)
        + 4
        + 4 + m.headers.iter().map(|(n, v)| 8 + n.len() + v.len()).sum::<usize>()
        + 64 // Failed/Snapshot extras (state, time, reason tag and length)
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// Why a body could not be decoded.
pub(crate) type DecodeError = String;

/// Reads fields off a body, checking every length.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| {
                format!(
                    "{what}: needs {n} bytes at {}, record has {}",
                    self.pos,
                    self.buf.len()
                )
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A version-1 id: 16 UUID bytes, as their hyphenated text.
    fn uuid_text(&mut self, what: &str) -> Result<String, DecodeError> {
        let b = self.take(16, what)?;
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        Ok(Uuid::from_bytes(a).hyphenated().to_string())
    }

    /// A message id of `version`'s format.
    fn id(&mut self, version: u8) -> Result<String, DecodeError> {
        if version == FORMAT_V1 {
            return self.uuid_text("id");
        }
        let id = self.string("id")?;
        if id.is_empty() || id.len() > MAX_ID {
            return Err(format!("id: {} bytes, outside 1..={MAX_ID}", id.len()));
        }
        Ok(id)
    }

    fn bytes(&mut self, what: &str) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }

    fn string(&mut self, what: &str) -> Result<String, DecodeError> {
        let b = self.bytes(what)?;
        String::from_utf8(b.to_vec()).map_err(|_| format!("{what}: not UTF-8"))
    }

    fn flag(&mut self, what: &str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("{what}: bad presence flag {other}")),
        }
    }

    fn opt_string(&mut self, what: &str) -> Result<Option<String>, DecodeError> {
        if self.flag(what)? {
            Ok(Some(self.string(what)?))
        } else {
            Ok(None)
        }
    }

    fn time(&mut self, what: &str) -> Result<SystemTime, DecodeError> {
        Ok(UNIX_EPOCH + Duration::from_nanos(self.u64(what)?))
    }

    fn finish(&self) -> Result<(), DecodeError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(format!(
                "{} unexpected bytes after the record",
                self.buf.len() - self.pos
            ))
        }
    }
}

/// Decodes a record body (after the frame header and CRC check).
pub(crate) fn decode_body(body: &[u8]) -> Result<Entry, DecodeError> {
    let mut c = Cursor { buf: body, pos: 0 };
    let version = c.u8("version")?;
    if !matches!(version, FORMAT_V1 | FORMAT_V2 | FORMAT_V3 | FORMAT_VERSION) {
        return Err(format!("unknown record format version {version}"));
    }
    let kind = c.u8("kind")?;
    let id = c.id(version)?;
    let text = |id: String| RecordId::Text(id.into_boxed_str());
    let entry = match kind {
        1 => Entry::Append(Arc::new(get_message(&mut c, id, version)?)),
        2 => Entry::Processing(text(id)),
        3 => {
            let at = if version >= FORMAT_V3 {
                c.time("at")?
            } else {
                UNIX_EPOCH
            };
            Entry::Complete(text(id), at)
        }
        4 => Entry::Retry(Arc::new(get_message(&mut c, id, version)?)),
        5 => {
            let died_at = c.time("died_at")?;
            let reason = get_reason(&mut c)?;
            let handlers = get_handlers(&mut c, version)?;
            let message = Arc::new(get_message(&mut c, id, version)?);
            Entry::Failed {
                message,
                reason,
                died_at,
                handlers,
            }
        }
        9 => {
            let at = c.time("at")?;
            let n = c.u32("messages")? as usize;
            // Each message takes far more than 4 bytes: a corrupt count cannot allocate much.
            if n > (c.buf.len() - c.pos) / 4 {
                return Err(format!("{n} messages cannot fit in the record"));
            }
            let mut messages = Vec::with_capacity(n);
            for _ in 0..n {
                let mid = c.string("message id")?;
                if mid.is_empty() || mid.len() > MAX_ID {
                    return Err(format!("a message id of {} bytes", mid.len()));
                }
                messages.push(Arc::new(get_message(&mut c, mid, version)?));
            }
            Entry::CompleteWith {
                id: text(id),
                at,
                messages,
            }
        }
        6 => Entry::Cancel(text(id)),
        7 => Entry::Purge(text(id)),
        8 => {
            let state = match c.u8("state")? {
                0 => WalRecordState::Pending,
                1 => WalRecordState::Processing,
                2 => WalRecordState::Complete,
                3 => WalRecordState::Failed,
                other => return Err(format!("unknown record state {other}")),
            };
            let at = c.time("at")?;
            let reason = get_reason(&mut c)?;
            let handlers = get_handlers(&mut c, version)?;
            let message = Arc::new(get_message(&mut c, id, version)?);
            Entry::Snapshot {
                message,
                reason: (state == WalRecordState::Failed).then_some(reason),
                state,
                at,
                handlers,
            }
        }
        other => return Err(format!("unknown record kind {other}")),
    };
    c.finish()?;
    Ok(entry)
}

/// The handlers of a dead letter (none before version 3). The count is checked against the
/// bytes left (each name takes at least its 4-byte length), so a corrupt count cannot make
/// the decoder allocate more than the record holds.
fn get_handlers(c: &mut Cursor<'_>, version: u8) -> Result<Vec<String>, DecodeError> {
    if version < FORMAT_V3 {
        return Ok(Vec::new());
    }
    let n = c.u32("handlers")? as usize;
    if n > (c.buf.len() - c.pos) / 4 {
        return Err(format!("{n} handler names cannot fit in the record"));
    }
    (0..n).map(|_| c.string("handler")).collect()
}

fn get_reason(c: &mut Cursor<'_>) -> Result<DeadReason, DecodeError> {
    Ok(match c.u8("reason")? {
        0 => DeadReason::Explicit,
        1 => DeadReason::MaxRetriesExceeded,
        2 => DeadReason::Timeout,
        3 => DeadReason::NoHandler,
        4 => DeadReason::UnknownWorker(c.string("reason")?),
        5 => DeadReason::Other(c.string("reason")?),
        other => return Err(format!("unknown dead reason {other}")),
    })
}

fn get_message(c: &mut Cursor<'_>, id: String, version: u8) -> Result<EMessage, DecodeError> {
    let topic = MessageTopic(c.string("topic")?);
    let payload = MessagePayload(Bytes::copy_from_slice(c.bytes("payload")?));
    let created_at = c.time("created_at")?;
    let trace_id = c.opt_string("trace_id")?;
    let correlation_id = c.opt_string("correlation_id")?;
    let causation_id = match (version, c.flag("causation_id")?) {
        (_, false) => None,
        (FORMAT_V1, true) => Some(c.uuid_text("causation_id")?),
        (_, true) => Some(c.string("causation_id")?),
    };
    let source = c.opt_string("source")?;
    let attempts = c.u32("attempts")?;
    let mode_tag = c.u8("delivery_mode")?;
    let n = c.u32("delivery_mode")?;
    let delivery_mode = match mode_tag {
        0 => DeliveryMode::Standard,
        1 => DeliveryMode::Repeated(n),
        2 => DeliveryMode::Broadcast,
        other => return Err(format!("unknown delivery mode {other}")),
    };
    let consumed_count = c.u32("consumed_count")?;
    let deliver_at = if c.flag("deliver_at")? {
        Some(c.time("deliver_at")?)
    } else {
        None
    };
    let to_worker = c.opt_string("to_worker")?;
    let layout = c.u32("version")?;
    let headers = get_headers(c, version)?;
    Ok(EMessage {
        id,
        topic,
        payload,
        metadata: MessageMetadata {
            created_at,
            trace_id,
            correlation_id,
            causation_id,
            source,
        },
        attempts,
        delivery_mode,
        consumed_count,
        deliver_at,
        to_worker,
        version: layout,
        headers,
    })
}

/// A message's headers (none before version 4), the count checked as `get_handlers` does.
fn get_headers(c: &mut Cursor<'_>, version: u8) -> Result<MessageHeaders, DecodeError> {
    if version < FORMAT_VERSION {
        return Ok(MessageHeaders::new());
    }
    let n = c.u32("headers")? as usize;
    if n > (c.buf.len() - c.pos) / 8 {
        return Err(format!("{n} headers cannot fit in the record"));
    }
    let mut headers = MessageHeaders::new();
    for _ in 0..n {
        let name = c.string("header name")?;
        let value = c.string("header value")?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// Result of reading one frame from a buffer.
#[derive(Debug)]
pub(crate) enum Frame {
    /// A valid record and the frame's total length.
    Record(Entry, usize),
    /// The buffer ends inside the frame (a torn write).
    Torn,
    /// The frame is invalid (bad length, CRC or body).
    Corrupt(String),
}

/// The body of the frame at the start of `buf`, its length and CRC checked; or why not
/// (`Frame::Torn` or `Frame::Corrupt`).
fn frame_body(buf: &[u8], max_body: usize) -> Result<&[u8], Frame> {
    if buf.len() < FRAME_HEADER {
        return Err(Frame::Torn);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if len < MIN_BODY {
        return Err(Frame::Corrupt(format!(
            "record length {len} is below the minimum {MIN_BODY}"
        )));
    }
    if len > max_body {
        return Err(Frame::Corrupt(format!(
            "record length {len} exceeds the limit {max_body}"
        )));
    }
    let Some(body) = buf.get(FRAME_HEADER..FRAME_HEADER + len) else {
        return Err(Frame::Torn);
    };
    let actual = crc32fast::hash(body);
    if actual != crc {
        return Err(Frame::Corrupt(format!(
            "CRC mismatch (stored {crc:08x}, computed {actual:08x})"
        )));
    }
    Ok(body)
}

/// Reads the frame at the start of `buf`.
pub(crate) fn read_frame(buf: &[u8], max_body: usize) -> Frame {
    let body = match frame_body(buf, max_body) {
        Ok(body) => body,
        Err(frame) => return frame,
    };
    match decode_body(body) {
        Ok(entry) => Frame::Record(entry, FRAME_HEADER + body.len()),
        Err(e) => Frame::Corrupt(e),
    }
}

/// A frame as recovery's scan reads it: records that only say a message is pending
/// (`Append`, `Retry`, a `Snapshot` of a pending or processing message) by their id alone,
/// their message left undecoded for a read-back; every other record decoded.
#[derive(Debug)]
pub(crate) enum Peeked<'a> {
    /// A pending message's record: its id, state (`Pending` or `Processing`), the
    /// message's `created_at` (ns since the epoch), the frame's length.
    Pending(Cow<'a, str>, WalRecordState, u64, usize),
    /// Any other valid record and the frame's length.
    Record(Entry, usize),
    /// As [`Frame::Torn`].
    Torn,
    /// As [`Frame::Corrupt`].
    Corrupt(String),
}

/// Reads the frame at the start of `buf` as [`Peeked`]. The frame's length and CRC are
/// checked as [`read_frame`] checks them; a pending message's fields are not decoded (their
/// damage shows when the message is read back).
pub(crate) fn peek_frame(buf: &[u8], max_body: usize) -> Peeked<'_> {
    let body = match frame_body(buf, max_body) {
        Ok(body) => body,
        Err(Frame::Torn) => return Peeked::Torn,
        Err(Frame::Corrupt(reason)) => return Peeked::Corrupt(reason),
        Err(Frame::Record(entry, len)) => return Peeked::Record(entry, len),
    };
    let len = FRAME_HEADER + body.len();
    let mut c = Cursor { buf: body, pos: 0 };
    let light = (|| {
        let version = c.u8("version")?;
        if !matches!(version, FORMAT_V1 | FORMAT_V2 | FORMAT_V3 | FORMAT_VERSION) {
            return Err(format!("unknown record format version {version}"));
        }
        let kind = c.u8("kind")?;
        if !matches!(kind, 1 | 4 | 8) {
            return Ok(None);
        }
        let id = if version == FORMAT_V1 {
            Cow::Owned(c.id(version)?)
        } else {
            // Borrowed from the segment's bytes: no allocation per record.
            let b = c.bytes("id")?;
            let id = std::str::from_utf8(b).map_err(|_| "id: not UTF-8".to_string())?;
            if id.is_empty() || id.len() > MAX_ID {
                return Err(format!("id: {} bytes, outside 1..={MAX_ID}", id.len()));
            }
            Cow::Borrowed(id)
        };
        let state = match kind {
            8 => {
                let state = match c.u8("state")? {
                    0 => WalRecordState::Pending,
                    1 => WalRecordState::Processing,
                    _ => return Ok(None),
                };
                c.u64("at")?;
                get_reason(&mut c)?;
                if version >= FORMAT_VERSION {
                    for _ in 0..c.u32("handlers")? {
                        c.bytes("handler")?;
                    }
                }
                state
            }
            _ => WalRecordState::Pending,
        };
        // The message's fields up to its creation time: the replay's order.
        c.bytes("topic")?;
        c.bytes("payload")?;
        let created = c.u64("created_at")?;
        Ok(Some((id, state, created)))
    })();
    match light {
        Ok(Some((id, state, created))) => Peeked::Pending(id, state, created, len),
        Ok(None) => match decode_body(body) {
            Ok(entry) => Peeked::Record(entry, len),
            Err(e) => Peeked::Corrupt(e),
        },
        Err(e) => Peeked::Corrupt(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_opt_string() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(".{0,12}")
    }

    fn arb_message() -> impl Strategy<Value = EMessage> {
        (
            "[a-zA-Z0-9._-]{1,40}",
            "[a-z._]{1,20}",
            proptest::collection::vec(any::<u8>(), 0..256),
            (arb_opt_string(), arb_opt_string(), arb_opt_string()),
            arb_opt_string(),
            any::<u32>(),
            (0u8..3, any::<u32>()),
            proptest::option::of(0u64..4_000_000_000_000_000_000),
            arb_opt_string(),
            proptest::collection::vec(("[a-z-]{1,8}", ".{0,12}"), 0..3),
        )
            .prop_map(
                |(
                    id,
                    topic,
                    payload,
                    (trace, corr, source),
                    cause,
                    attempts,
                    (mode, n),
                    at,
                    to,
                    headers,
                )| {
                    let mut m = EMessage::new(
                        topic.as_str(),
                        payload,
                        match mode {
                            0 => DeliveryMode::Standard,
                            1 => DeliveryMode::Repeated(n),
                            _ => DeliveryMode::Broadcast,
                        },
                        to,
                    );
                    m.id = id;
                    m.metadata.created_at =
                        UNIX_EPOCH + Duration::from_nanos(1_700_000_000_000_000_000);
                    m.metadata.trace_id = trace;
                    m.metadata.correlation_id = corr;
                    m.metadata.source = source;
                    m.metadata.causation_id = cause;
                    m.attempts = attempts;
                    m.deliver_at = at.map(|ns| UNIX_EPOCH + Duration::from_nanos(ns));
                    m.headers = headers.into_iter().collect();
                    m
                },
            )
    }

    fn arb_id() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<[u8; 16]>().prop_map(|b| Uuid::from_bytes(b).hyphenated().to_string()),
            ".{1,60}".prop_filter("ids are at most 255 bytes", |s| s.len() <= 255),
        ]
    }

    fn arb_reason() -> impl Strategy<Value = DeadReason> {
        prop_oneof![
            Just(DeadReason::Explicit),
            Just(DeadReason::MaxRetriesExceeded),
            Just(DeadReason::Timeout),
            Just(DeadReason::NoHandler),
            ".{0,10}".prop_map(DeadReason::UnknownWorker),
            ".{0,10}".prop_map(DeadReason::Other),
        ]
    }

    fn arb_handlers() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec("[a-z_]{1,12}", 0..3)
    }

    fn arb_entry() -> impl Strategy<Value = Entry> {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        prop_oneof![
            arb_message().prop_map(|m| Entry::Append(Arc::new(m))),
            arb_message().prop_map(|m| Entry::Retry(Arc::new(m))),
            (arb_message(), arb_reason(), arb_handlers()).prop_map(move |(m, r, h)| {
                Entry::Failed {
                    message: Arc::new(m),
                    reason: r,
                    died_at: t,
                    handlers: h,
                }
            }),
            (arb_message(), arb_reason(), 0u8..4, arb_handlers()).prop_map(move |(m, r, s, h)| {
                let state = [
                    WalRecordState::Pending,
                    WalRecordState::Processing,
                    WalRecordState::Complete,
                    WalRecordState::Failed,
                ][s as usize];
                Entry::Snapshot {
                    message: Arc::new(m),
                    reason: (state == WalRecordState::Failed).then_some(r),
                    state,
                    at: t,
                    handlers: h,
                }
            }),
            arb_id().prop_map(|id| Entry::Processing(RecordId::Text(id.into()))),
            arb_id().prop_map(move |id| Entry::Complete(RecordId::Text(id.into()), t)),
            (arb_id(), proptest::collection::vec(arb_message(), 0..3)).prop_map(move |(id, ms)| {
                Entry::CompleteWith {
                    id: RecordId::Text(id.into()),
                    at: t,
                    messages: ms.into_iter().map(Arc::new).collect(),
                }
            }),
            arb_id().prop_map(|id| Entry::Cancel(RecordId::Text(id.into()))),
            arb_id().prop_map(|id| Entry::Purge(RecordId::Text(id.into()))),
        ]
    }

    /// A version 2 `Complete` (no time) is still read, its time unknown (the epoch).
    #[test]
    fn a_version_2_completion_reads_with_no_time() {
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut v3 = Vec::new();
        encode(&Entry::Complete(RecordId::Text("abc".into()), at), &mut v3);
        let mut body = v3[FRAME_HEADER..].to_vec();
        body[0] = FORMAT_V2;
        body.truncate(body.len() - 8);
        assert_eq!(
            decode_body(&body),
            Ok(Entry::Complete(RecordId::Text("abc".into()), UNIX_EPOCH))
        );
    }

    /// A version 2 dead letter (no handler list) is still read, with no handlers.
    #[test]
    fn a_version_2_dead_letter_reads_with_no_handlers() {
        let message = Arc::new(EMessage::standard("orders", b"x".to_vec()));
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let entry = Entry::Failed {
            message: message.clone(),
            reason: DeadReason::Timeout,
            died_at: at,
            handlers: Vec::new(),
        };
        let mut v3 = Vec::new();
        encode(&entry, &mut v3);
        // The v2 body: version 2, and no handler count between the reason and the message.
        let mut body = v3[FRAME_HEADER..].to_vec();
        body[0] = FORMAT_V2;
        let count_at = 2 + 4 + message.id.len() + 8 + 1;
        assert_eq!(&body[count_at..count_at + 4], &[0, 0, 0, 0]);
        body.drain(count_at..count_at + 4);
        // Nor a header count at the end of the message (version 4 on).
        assert_eq!(&body[body.len() - 4..], &[0, 0, 0, 0]);
        body.truncate(body.len() - 4);
        assert_eq!(decode_body(&body), Ok(entry));
    }

    /// A version 3 message (no headers) is still read, with none; a version 4 one keeps them.
    #[test]
    fn a_version_3_message_reads_with_no_headers_and_version_4_keeps_them() {
        let keyed = Arc::new(
            EMessage::standard("orders", b"x".to_vec())
                .with_key("customer-7")
                .with_header("traceparent", "00-abc-def-01"),
        );
        let mut v4 = Vec::new();
        encode(&Entry::Append(keyed.clone()), &mut v4);
        let body = v4[FRAME_HEADER..].to_vec();
        assert_eq!(decode_body(&body), Ok(Entry::Append(keyed.clone())));

        let plain = Arc::new(EMessage::standard("orders", b"x".to_vec()));
        let mut buf = Vec::new();
        encode(&Entry::Append(plain.clone()), &mut buf);
        let mut v3 = buf[FRAME_HEADER..].to_vec();
        v3[0] = FORMAT_V3;
        v3.truncate(v3.len() - 4);
        assert_eq!(decode_body(&v3), Ok(Entry::Append(plain)));
    }

    /// A header count larger than the record is an error, not an allocation.
    #[test]
    fn a_corrupt_header_count_is_an_error() {
        let plain = Arc::new(EMessage::standard("orders", b"x".to_vec()));
        let mut buf = Vec::new();
        encode(&Entry::Append(plain), &mut buf);
        let mut body = buf[FRAME_HEADER..].to_vec();
        let at = body.len() - 4;
        body[at..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_body(&body).unwrap_err().contains("headers"));
    }

    proptest! {
        #[test]
        fn records_round_trip(entry in arb_entry()) {
            let mut buf = Vec::new();
            encode(&entry, &mut buf);
            match read_frame(&buf, 1 << 20) {
                Frame::Record(decoded, len) => {
                    prop_assert_eq!(len, buf.len());
                    prop_assert_eq!(decoded, entry);
                }
                other => prop_assert!(false, "decoded {:?}", other),
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = read_frame(&bytes, 1 << 20);
            let _ = decode_body(&bytes);
        }

        #[test]
        fn any_single_flipped_bit_is_detected(entry in arb_entry(), at in any::<usize>(), bit in 0u8..8) {
            let mut buf = Vec::new();
            encode(&entry, &mut buf);
            let i = at % buf.len();
            buf[i] ^= 1 << bit;
            match read_frame(&buf, 1 << 20) {
                Frame::Record(decoded, _) => prop_assert!(false, "flipped byte {} accepted as {:?}", i, decoded),
                Frame::Torn | Frame::Corrupt(_) => {}
            }
        }
    }

    #[test]
    fn a_truncated_frame_is_torn() {
        let mut buf = Vec::new();
        encode(
            &Entry::Complete(RecordId::Text("x".into()), UNIX_EPOCH),
            &mut buf,
        );
        for cut in 0..buf.len() {
            assert!(
                matches!(read_frame(&buf[..cut], 1 << 20), Frame::Torn),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_huge_length_is_corrupt_not_an_allocation() {
        let mut buf = vec![0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0];
        buf.extend_from_slice(&[0u8; 32]);
        assert!(matches!(read_frame(&buf, 1 << 20), Frame::Corrupt(_)));
    }
}
