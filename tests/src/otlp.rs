//! OTLP/HTTP trace exports decoded by the official protobuf definitions
//! (`opentelemetry-proto`, installed by scripts/test.sh into the tools
//! venv): the collector stub's bodies become JSON with hex ids.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

const DECODE: &str = r#"
import json, sys
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
request = ExportTraceServiceRequest()
request.ParseFromString(sys.stdin.buffer.read())
out = MessageToDict(request, preserving_proto_field_name=True)
def hexify(message_dict, message):
    for rs_dict, rs in zip(message_dict.get("resource_spans", []), message.resource_spans):
        for ss_dict, ss in zip(rs_dict.get("scope_spans", []), rs.scope_spans):
            for span_dict, span in zip(ss_dict.get("spans", []), ss.spans):
                span_dict["trace_id"] = span.trace_id.hex()
                span_dict["span_id"] = span.span_id.hex()
                span_dict["parent_span_id"] = span.parent_span_id.hex()
                span_dict["start_time_unix_nano"] = span.start_time_unix_nano
                span_dict["end_time_unix_nano"] = span.end_time_unix_nano
hexify(out, request)
print(json.dumps(out))
"#;

/// Decodes one `ExportTraceServiceRequest`; panics with the decoder's
/// error when the bytes are not one.
pub fn decode(body: &[u8]) -> Value {
    let mut child = Command::new(crate::prometheus::python())
        .args(["-c", DECODE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python for opentelemetry-proto (scripts/test.sh installs it)");
    child.stdin.take().expect("stdin").write_all(body).expect("write body");
    let output = child.wait_with_output().expect("decoder output");
    assert!(
        output.status.success(),
        "opentelemetry-proto could not decode the export: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("decoder JSON")
}
