//! Read views over a store, shared by every frontend: the conversation list (`flue session
//! list`, the dev console's list) and a conversation's transcript (`flue session show`, the
//! console's transcript). They read what the store holds and run nothing.

mod listing;
mod transcript;

pub use listing::{
    ConversationIndex, ConversationPage, ConversationQuery, ConversationStatus,
    ConversationSummary, FIRST_MESSAGE_CHARS, MAX_LIST_LIMIT, conversation_usage,
};
pub use transcript::{Transcript, transcript_tree};
