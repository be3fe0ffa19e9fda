//! Reading Redis replies into plain values, every surprise a typed error (never a panic).

use redis::Value;

use crate::codec::bytes_of;
use crate::error::RedisError;

/// The fields of an entry: name and value pairs.
pub(crate) type Fields = Vec<(Vec<u8>, Value)>;

/// One stream entry as read: its id and fields (`None`: the entry was deleted).
pub(crate) type RawEntry = (String, Option<Fields>);

fn unexpected(command: &'static str, what: impl Into<String>) -> RedisError {
    RedisError::UnexpectedReply {
        command,
        what: what.into(),
    }
}

/// A string reply.
pub(crate) fn string(command: &'static str, v: &Value) -> Result<String, RedisError> {
    bytes_of(v)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .ok_or_else(|| unexpected(command, format!("expected a string, got {v:?}")))
}

/// An integer reply.
pub(crate) fn int(command: &'static str, v: &Value) -> Result<i64, RedisError> {
    match v {
        Value::Int(i) => Ok(*i),
        other => bytes_of(other)
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| unexpected(command, format!("expected an integer, got {v:?}"))),
    }
}

/// A hash's field and its value, as bytes.
pub(crate) type Pair = (Vec<u8>, Vec<u8>);

/// A hash's fields and values (`HGETALL`), as a map or as a flat array of pairs.
pub(crate) fn pairs(command: &'static str, v: &Value) -> Result<Vec<Pair>, RedisError> {
    let bytes = |x: &Value| {
        bytes_of(x)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| unexpected(command, format!("expected a string, got {x:?}")))
    };
    match v {
        Value::Map(m) => m.iter().map(|(k, x)| Ok((bytes(k)?, bytes(x)?))).collect(),
        other => array(command, other)?
            .chunks(2)
            .map(|kv| match kv {
                [k, x] => Ok((bytes(k)?, bytes(x)?)),
                _ => Err(unexpected(command, "an odd number of hash items")),
            })
            .collect(),
    }
}

/// An array reply (nil is empty).
pub(crate) fn array<'v>(command: &'static str, v: &'v Value) -> Result<&'v [Value], RedisError> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        Value::Nil => Ok(&[]),
        other => Err(unexpected(
            command,
            format!("expected an array, got {other:?}"),
        )),
    }
}

/// A list of entries (`[[id, [k, v, ...]], ...]`, fields nil for a deleted entry).
pub(crate) fn entries(command: &'static str, v: &Value) -> Result<Vec<RawEntry>, RedisError> {
    let mut out = Vec::new();
    for e in array(command, v)? {
        let pair = array(command, e)?;
        let [id, fields] = pair else {
            return Err(unexpected(
                command,
                format!("an entry of {} parts", pair.len()),
            ));
        };
        let id = string(command, id)?;
        let fields = match fields {
            Value::Nil => None,
            f => {
                let flat = array(command, f)?;
                if flat.len() % 2 != 0 {
                    return Err(unexpected(
                        command,
                        "an odd number of field names and values",
                    ));
                }
                let mut pairs = Vec::with_capacity(flat.len() / 2);
                for kv in flat.chunks_exact(2) {
                    let name = bytes_of(&kv[0])
                        .ok_or_else(|| unexpected(command, "a field name that is not a string"))?;
                    pairs.push((name.to_vec(), kv[1].clone()));
                }
                Some(pairs)
            }
        };
        out.push((id, fields));
    }
    Ok(out)
}

/// The entries of an `XREADGROUP` of one stream (nil: none).
pub(crate) fn read_group(v: &Value) -> Result<Vec<RawEntry>, RedisError> {
    const CMD: &str = "XREADGROUP";
    let streams = array(CMD, v)?;
    let Some(first) = streams.first() else {
        return Ok(Vec::new());
    };
    match array(CMD, first)? {
        [_key, list] => entries(CMD, list),
        other => Err(unexpected(
            CMD,
            format!("a stream of {} parts", other.len()),
        )),
    }
}

/// The `RECLAIM` script's reply: the next cursor, the entries taken over, and the delivery
/// count of each.
pub(crate) fn reclaim(v: &Value) -> Result<(String, Vec<(RawEntry, i64)>), RedisError> {
    const CMD: &str = "RECLAIM";
    let parts = array(CMD, v)?;
    let (Some(cursor), Some(list), Some(counts)) = (parts.first(), parts.get(1), parts.get(2))
    else {
        return Err(unexpected(CMD, format!("{} parts", parts.len())));
    };
    let entries = entries(CMD, list)?;
    let counts = ints(CMD, counts)?;
    if entries.len() != counts.len() {
        return Err(unexpected(
            CMD,
            format!("{} entries and {} counts", entries.len(), counts.len()),
        ));
    }
    Ok((
        string(CMD, cursor)?,
        entries.into_iter().zip(counts).collect(),
    ))
}

/// The integers of an array reply (the counts scripts return).
pub(crate) fn ints(command: &'static str, v: &Value) -> Result<Vec<i64>, RedisError> {
    array(command, v)?.iter().map(|x| int(command, x)).collect()
}

/// The value of `field` in an `INFO` reply.
pub(crate) fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_read_reply_gives_entries_and_nil_gives_none() {
        assert!(read_group(&Value::Nil).unwrap().is_empty());
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("k"),
            Value::Array(vec![
                Value::Array(vec![bulk("1-0"), Value::Array(vec![bulk("m"), bulk("x")])]),
                Value::Array(vec![bulk("2-0"), Value::Nil]),
            ]),
        ])]);
        let e = read_group(&reply).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].0, "1-0");
        assert_eq!(e[0].1.as_ref().unwrap()[0].0, b"m");
        assert!(e[1].1.is_none());
    }

    #[test]
    fn malformed_replies_are_errors() {
        assert!(read_group(&Value::Int(3)).is_err());
        let odd = Value::Array(vec![Value::Array(vec![
            bulk("1-0"),
            Value::Array(vec![bulk("m")]),
        ])]);
        assert!(entries("X", &odd).is_err());
        assert!(reclaim(&Value::Array(vec![bulk("0-0")])).is_err());
        let mismatched = Value::Array(vec![
            bulk("0-0"),
            Value::Array(vec![Value::Array(vec![bulk("1-0"), Value::Nil])]),
            Value::Array(vec![]),
        ]);
        assert!(reclaim(&mismatched).is_err());
    }

    #[test]
    fn info_fields_are_found_by_name() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(info_field(info, "redis_version").as_deref(), Some("7.0.15"));
        assert_eq!(info_field(info, "redis"), None);
    }
}
