//! `grpc-gateway`'s config schema: Kong 3.9's fields, defaults and checks.

use strait_core::schema::PluginSchema;
use strait_core::schema::field::Field;

/// Kong's `grpc-gateway`: `proto`, the path of the `.proto` file on the node.
pub(super) fn schema() -> PluginSchema {
    PluginSchema::new(vec![("proto", Field::string())])
}
