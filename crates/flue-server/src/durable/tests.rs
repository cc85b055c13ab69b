//! Unit tests of projecting stored batches into protocol chunks.

use flue_core::{BatchBody, Record, StoredRecord, StreamBatch, ToolResult, record::EmittedData};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::project;
use crate::wire::ChunkBody;

#[test]
fn data_a_tool_emitted_becomes_one_data_part_per_write_after_its_output() {
    let result = ToolResult {
        call_id: "call_1".into(),
        tool_name: "report".into(),
        content: "ready".into(),
        is_error: false,
        error_kind: None,
        data: vec![
            EmittedData {
                name: "progress".into(),
                data: json!({"done": 1}),
                id: Some("p1".into()),
            },
            EmittedData {
                name: "chart".into(),
                data: json!([1, 2]),
                id: None,
            },
        ],
    };
    let batch = StreamBatch {
        offset: flue_core::Offset(7),
        at: 0,
        submission_id: Some("s1".into()),
        body: BatchBody::Records {
            session: "default".into(),
            first_index: 2,
            records: vec![StoredRecord::new(Record::ToolResult(result), 0)],
        },
    };
    let chunks = project(&batch);
    let parts: Vec<(&str, &str, &serde_json::Value)> = chunks
        .iter()
        .filter_map(|chunk| match chunk {
            ChunkBody::DataPart {
                message_id,
                name,
                data,
            } => Some((message_id.as_str(), name.as_str(), data)),
            _ => None,
        })
        .collect();
    assert_eq!(
        parts,
        [
            ("reply_s1", "progress", &json!({"done": 1})),
            ("reply_s1", "chart", &json!([1, 2])),
        ]
    );
    assert!(
        matches!(chunks[0], ChunkBody::ToolOutput { .. }),
        "{chunks:?}"
    );
}
