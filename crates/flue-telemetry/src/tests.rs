//! Unit tests: which `OTEL_*` settings turn which export on.

use pretty_assertions::assert_eq;

use crate::ExportSettings;

fn settings(vars: &[(&str, &str)]) -> ExportSettings {
    ExportSettings::from_vars(|name| {
        vars.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    })
}

#[test]
fn nothing_is_exported_without_an_endpoint() {
    assert_eq!(settings(&[]), ExportSettings::default());
    assert_eq!(
        settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]),
        ExportSettings::default()
    );
}

#[test]
fn the_common_endpoint_turns_on_traces_and_metrics() {
    assert_eq!(
        settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]),
        ExportSettings {
            traces: true,
            metrics: true,
            capture_content: false,
        }
    );
}

#[test]
fn a_signal_endpoint_turns_on_that_signal_only() {
    assert_eq!(
        settings(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:4318/v1/traces"
        )]),
        ExportSettings {
            traces: true,
            metrics: false,
            capture_content: false,
        }
    );
}

#[test]
fn exporters_none_and_sdk_disabled_turn_export_off() {
    let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
    assert_eq!(
        settings(&[endpoint, ("OTEL_METRICS_EXPORTER", "none")]),
        ExportSettings {
            traces: true,
            metrics: false,
            capture_content: false,
        }
    );
    assert_eq!(
        settings(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]),
        ExportSettings::default()
    );
}

#[test]
fn content_capture_is_opt_in() {
    let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
    assert!(
        settings(&[
            endpoint,
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        ])
        .capture_content
    );
    assert!(
        !settings(&[
            endpoint,
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "1")
        ])
        .capture_content
    );
}
