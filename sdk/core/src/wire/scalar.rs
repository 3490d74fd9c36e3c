//! Clause values and context attributes on the wire: `flagstream.v1.Scalar`
//! (a string, number or bool), used by clauses and by contexts alike.

use flagstream_proto::v1 as pb;

use crate::context::Scalar;

/// The protobuf form of a scalar.
pub(crate) fn scalar_to_proto(s: &Scalar<'_>) -> pb::Scalar {
    let value = match s {
        Scalar::Str(v) => pb::scalar::Value::StringValue(v.to_string()),
        Scalar::Num(n) => pb::scalar::Value::NumberValue(*n),
        Scalar::Bool(b) => pb::scalar::Value::BoolValue(*b),
    };
    pb::Scalar { value: Some(value) }
}

/// A scalar from protobuf (`None`: no value set).
pub(crate) fn scalar_from_proto(s: &pb::Scalar) -> Option<Scalar<'static>> {
    Some(match s.value.as_ref()? {
        pb::scalar::Value::StringValue(v) => Scalar::Str(v.clone().into()),
        pb::scalar::Value::NumberValue(n) => Scalar::Num(*n),
        pb::scalar::Value::BoolValue(b) => Scalar::Bool(*b),
    })
}
