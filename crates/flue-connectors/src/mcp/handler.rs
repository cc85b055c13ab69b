//! The client side of a connection: what flue announces in the handshake and how it answers
//! the requests a server sends back (elicitation).

use std::sync::Arc;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation, MetaObject, ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{ClientHandler, ErrorData, RoleClient};
use serde_json::Value;

use super::elicitation::{ElicitationAnswer, ElicitationRequest, McpElicitor};

/// Answers a server's requests for one connection.
pub(crate) struct Handler {
    info: ClientConfig,
    server: String,
    elicitor: Option<Arc<dyn McpElicitor>>,
}

impl Handler {
    /// The handler for server `server`; elicitation is announced only when someone answers it.
    pub(crate) fn new(server: &str, elicitor: Option<Arc<dyn McpElicitor>>) -> Self {
        let mut capabilities = ClientCapabilities::default();
        if elicitor.is_some() {
            let mut elicitation = ElicitationCapability::new();
            elicitation.form = Some(FormElicitationCapability::new());
            capabilities.elicitation = Some(elicitation);
        }
        let info = ClientConfig::new(
            capabilities,
            Implementation::new("flue", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        Self {
            info,
            server: server.to_owned(),
            elicitor,
        }
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<ElicitResult, ErrorData>> + Send + '_ {
        async move {
            let decline = |reason: String| {
                let mut meta = serde_json::Map::new();
                meta.insert("reason".to_owned(), Value::String(reason));
                ElicitResult::new(ElicitationAction::Decline).with_meta(MetaObject(meta))
            };
            let Some(elicitor) = &self.elicitor else {
                return Ok(decline("this client has no one to ask".to_owned()));
            };
            let (message, schema) = match request {
                ElicitRequestParams::FormElicitationParams {
                    message,
                    requested_schema,
                    ..
                } => (
                    message,
                    serde_json::to_value(&requested_schema).unwrap_or(Value::Null),
                ),
                _ => {
                    return Ok(decline("flue answers form elicitation only".to_owned()));
                }
            };
            let request = ElicitationRequest::new(&self.server, message, schema);
            Ok(match elicitor.elicit(&request).await {
                ElicitationAnswer::Accept(values) => {
                    ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(values))
                }
                ElicitationAnswer::Decline { reason } => decline(reason),
                ElicitationAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
            })
        }
    }
}
