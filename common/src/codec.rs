//! The gRPC codec of `profd.v1`: prost's encoding, and a decoder that refuses
//! what prost would read wrongly or not at all. prost keeps the low 32 bits of
//! a varint sent for a 32-bit field (a pid of 2³² + 1 becomes pid 1); this
//! decoder checks every such field against the API's own descriptors first.
//! Either way a bad message is INVALID_ARGUMENT, naming the field.
use prost::bytes::Buf;
use prost::{Message, Name};
use prost_types::field_descriptor_proto::Type;
use prost_types::{DescriptorProto, FileDescriptorSet};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::LazyLock;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstCodec;

/// prost's codec with [`StrictDecoder`] (the generated stubs use it).
#[derive(Debug, Clone)]
pub struct StrictCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        StrictCodec(PhantomData)
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Name + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(PhantomData)
    }
}

/// Decodes a `U` once every 32-bit field in it holds a 32-bit value.
#[derive(Debug)]
pub struct StrictDecoder<U>(PhantomData<U>);

impl<U: Message + Name + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let bytes = buf.copy_to_bytes(buf.remaining());
        let name = U::full_name();
        check(&SCHEMA, &name, &bytes, 0).map_err(|e| Status::invalid_argument(e.to_string()))?;
        U::decode(bytes).map(Some).map_err(|e| {
            Status::invalid_argument(format!(
                "the message is not a valid {name}: {e}; send one encoded from proto/profd/v1/profd.proto"
            ))
        })
    }
}

/// One field of a message, as the descriptors declare it.
#[derive(Debug)]
struct Field {
    name: String,
    ty: Type,
    /// The message type's full name (no leading dot), for message fields.
    message: String,
}

/// Every message of the API, by full name (`profd.v1.AttachRequest`), with
/// its fields by number.
type Schema = HashMap<String, HashMap<u64, Field>>;

static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    let set = FileDescriptorSet::decode(crate::api::FILE_DESCRIPTOR_SET)
        .expect("the API's descriptors, compiled by build.rs, decode");
    let mut schema = Schema::new();
    for file in &set.file {
        for m in &file.message_type {
            add(&mut schema, file.package(), m);
        }
    }
    schema
});

fn add(schema: &mut Schema, scope: &str, m: &DescriptorProto) {
    let name = format!("{scope}.{}", m.name());
    for nested in &m.nested_type {
        add(schema, &name, nested);
    }
    let fields = m
        .field
        .iter()
        .map(|f| {
            let field = Field {
                name: f.name().to_string(),
                ty: f.r#type(),
                message: f.type_name().trim_start_matches('.').to_string(),
            };
            (u64::from(f.number() as u32), field)
        })
        .collect();
    schema.insert(name, fields);
}

/// A 32-bit field sent a value its type cannot hold.
#[derive(Debug, thiserror::Error)]
#[error("{msg}.{field} was sent {value}, which is out of range for its type {ty} ({range}): send a value in range")]
pub struct OutOfRange {
    /// The message's full name (`profd.v1.AttachRequest`).
    msg: String,
    field: String,
    value: u64,
    ty: &'static str,
    /// The values the type holds.
    range: &'static str,
}

/// Deeper messages are left to prost, which refuses them by itself.
const MAX_DEPTH: usize = 100;

/// Check the 32-bit fields of message `msg` encoded in `buf`. Encodings
/// that are malformed are left to prost, which says what is wrong.
fn check(schema: &Schema, msg: &str, mut buf: &[u8], depth: usize) -> Result<(), OutOfRange> {
    let Some(fields) = schema.get(msg).filter(|_| depth < MAX_DEPTH) else {
        return Ok(());
    };
    while !buf.is_empty() {
        let Ok(key) = prost::encoding::decode_varint(&mut buf) else {
            return Ok(());
        };
        let field = fields.get(&(key >> 3));
        match key & 7 {
            0 => {
                let Ok(value) = prost::encoding::decode_varint(&mut buf) else {
                    return Ok(());
                };
                if let Some(f) = field {
                    check_value(msg, f, value)?;
                }
            }
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                if buf.len() < n {
                    return Ok(());
                }
                buf.advance(n);
            }
            2 => {
                let len = prost::encoding::decode_varint(&mut buf).ok();
                let Some(len) = len.and_then(|l| usize::try_from(l).ok()) else {
                    return Ok(());
                };
                if buf.len() < len {
                    return Ok(());
                }
                let (body, rest) = buf.split_at(len);
                buf = rest;
                match field {
                    Some(f) if f.ty == Type::Message => check(schema, &f.message, body, depth + 1)?,
                    // A packed repeated field: its values one after another.
                    Some(f) => {
                        let mut values = body;
                        while !values.is_empty() {
                            let Ok(v) = prost::encoding::decode_varint(&mut values) else {
                                break;
                            };
                            check_value(msg, f, v)?;
                        }
                    }
                    None => {}
                }
            }
            // Groups and unknown wire types: prost says what is wrong.
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// Fail when varint `value` does not fit field `f`'s type.
fn check_value(msg: &str, f: &Field, value: u64) -> Result<(), OutOfRange> {
    let (fits, range) = match f.ty {
        Type::Uint32 => (value <= u64::from(u32::MAX), "0 to 4294967295"),
        Type::Sint32 => (value <= u64::from(u32::MAX), "-2147483648 to 2147483647"),
        // Negative int32 and enum values are sent sign-extended to 64 bits.
        Type::Int32 | Type::Enum => (
            i32::try_from(value as i64).is_ok(),
            "-2147483648 to 2147483647",
        ),
        _ => return Ok(()),
    };
    if fits {
        return Ok(());
    }
    let ty = match f.ty {
        Type::Enum => "enum",
        Type::Uint32 => "uint32",
        _ => "int32",
    };
    Err(OutOfRange {
        msg: msg.into(),
        field: f.name.clone(),
        value,
        ty,
        range,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api;

    /// `AttachRequest` with its fields widened to 64 bits on the wire.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Wide {
        #[prost(uint64, tag = "1")]
        pid: u64,
        #[prost(uint64, tag = "2")]
        frequency_hz: u64,
        #[prost(int64, tag = "5")]
        unwind: i64,
    }

    fn attach(wide: &Wide) -> Result<(), OutOfRange> {
        check(&SCHEMA, "profd.v1.AttachRequest", &wide.encode_to_vec(), 0)
    }

    #[test]
    fn out_of_range_32_bit_fields_are_named() {
        let ok = Wide {
            pid: u64::from(u32::MAX),
            frequency_hz: 99,
            unwind: -1,
        };
        attach(&ok).unwrap();
        let err = attach(&Wide {
            pid: (1 << 32) + 1,
            ..ok.clone()
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("profd.v1.AttachRequest.pid was sent 4294967297")
                && err.contains("uint32"),
            "{err}"
        );
        let err = attach(&Wide {
            unwind: 1 << 31,
            ..ok.clone()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("AttachRequest.unwind"), "{err}");
        let err = attach(&Wide {
            unwind: -(1 << 31) - 1,
            ..ok
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("enum"), "{err}");
    }

    #[test]
    fn nested_messages_are_checked() {
        // GetViewRequest { tree (field 2): TreeRequest { max_depth (3): 2^32 } }
        let mut tree = Vec::new();
        prost::encoding::uint64::encode(3, &(1u64 << 32), &mut tree);
        let mut req = Vec::new();
        prost::encoding::bytes::encode(2, &tree, &mut req);
        let name = api::GetViewRequest::full_name();
        let err = check(&SCHEMA, &name, &req, 0).unwrap_err().to_string();
        assert!(err.contains("profd.v1.TreeRequest.max_depth"), "{err}");
        // The same value in range decodes.
        let mut tree = Vec::new();
        prost::encoding::uint64::encode(3, &7u64, &mut tree);
        let mut req = Vec::new();
        prost::encoding::bytes::encode(2, &tree, &mut req);
        check(&SCHEMA, &name, &req, 0).unwrap();
        let decoded = api::GetViewRequest::decode(&req[..]).unwrap();
        assert!(matches!(
            decoded.view,
            Some(api::get_view_request::View::Tree(api::TreeRequest {
                max_depth: 7,
                ..
            }))
        ));
    }

    #[test]
    fn every_message_of_the_api_is_known() {
        for name in [
            api::AttachRequest::full_name(),
            api::TreeRequest::full_name(),
            api::WatchResponse::full_name(),
        ] {
            assert!(SCHEMA.contains_key(&name), "{name}");
        }
    }
}
