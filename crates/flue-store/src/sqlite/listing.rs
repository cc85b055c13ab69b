//! Conversation listings for [`SqliteStore`] (migration v8): each conversation row carries
//! its last write (`last_activity`, indexed most recent first, alone and per agent) and its
//! [`Summary`] as JSON, updated by the write it summarizes in the same transaction; the
//! FTS5 table `conversations_fts` (trigram tokens, so any run of three characters is found)
//! holds each conversation's agent, id and first message for searches. A store of an earlier
//! version gets its summaries computed from its rows once, in bulk, by the migration.

use flue_core::store::listing::{
    ListedConversation, ListedStatus, ListingQuery, MAX_LISTING_LIMIT, Summary, merge_page,
};
use flue_core::{ConversationKey, Result};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params, params_from_iter};

use super::{SqliteStore, get_u64, store_error};

/// Migration v8: the columns, indexes and search table, and every existing conversation's
/// summary computed from its rows in bulk (usage summed from its records' JSON, its first and
/// last message from its submissions, its last outcome from its last settlement), so that an
/// earlier store lists like a new one from its first opening on. What SQL cannot cut as
/// [`flue_core::store::listing::cut`] does (runs of whitespace) is kept as stored.
pub(super) const MIGRATION: &str = "
    ALTER TABLE conversations ADD COLUMN last_activity INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE conversations ADD COLUMN summary TEXT;
    ALTER TABLE conversations ADD COLUMN search_rowid INTEGER;
    CREATE INDEX conversations_by_activity ON conversations (last_activity, instance_id);
    CREATE INDEX conversations_by_agent_activity
        ON conversations (agent, last_activity, instance_id);
    CREATE VIRTUAL TABLE conversations_fts USING fts5 (text, tokenize = 'trigram');
    ALTER TABLE sessions ADD COLUMN managed INTEGER;
    UPDATE sessions SET managed = 1 WHERE session = 'default'
        AND instance_id IN (SELECT instance_id FROM conversations);
    CREATE INDEX sessions_unmanaged_roots ON sessions (updated_at, instance_id)
        WHERE session = 'default' AND managed IS NULL;
    UPDATE conversations SET last_activity = MAX(created_at, COALESCE(
        (SELECT s.at FROM stream s WHERE s.instance_id = conversations.instance_id
         ORDER BY s.seq DESC LIMIT 1), 0));
    CREATE TEMP TABLE backfill_usage AS
        SELECT instance_id,
            SUM(COALESCE(json_extract(record, '$.usage.input_tokens'), 0)) AS input,
            SUM(COALESCE(json_extract(record, '$.usage.output_tokens'), 0)) AS output,
            SUM(COALESCE(json_extract(record, '$.usage.cache_read_tokens'), 0)) AS cache_read,
            SUM(COALESCE(json_extract(record, '$.usage.cache_write_tokens'), 0)) AS cache_write,
            SUM(json_extract(record, '$.usage.cost_usd')) AS cost,
            SUM(json_extract(record, '$.type') IN ('assistant', 'failed_turn')) AS turns
        FROM records
        WHERE json_valid(record)
            AND json_extract(record, '$.type') IN ('assistant', 'failed_turn', 'sampling')
        GROUP BY instance_id;
    CREATE INDEX temp.backfill_usage_by_instance ON backfill_usage (instance_id);
    CREATE TEMP TABLE backfill_messages AS
        SELECT s.instance_id, s.position, s.idempotency_key, s.state, s.settlement,
            (SELECT substr(CASE json_extract(m.message, '$.kind')
                WHEN 'signal' THEN json_extract(m.message, '$.type') || ': '
                    || json_extract(m.message, '$.body')
                ELSE json_extract(m.message, '$.body') END, 1, 200)
             FROM (SELECT COALESCE((SELECT mm.message FROM submission_messages mm
                 WHERE mm.submission_id = s.submission_id), s.message) AS message) m
             WHERE json_valid(m.message)) AS line
        FROM submissions s;
    CREATE INDEX temp.backfill_messages_by_instance
        ON backfill_messages (instance_id, position);
    UPDATE conversations SET summary = json_object(
        'messages', COALESCE((SELECT version FROM sessions
            WHERE instance_id = conversations.instance_id AND session = 'default'), 0),
        'sessions', MAX(1, (SELECT COUNT(*) FROM sessions
            WHERE instance_id = conversations.instance_id)),
        'usage', json(COALESCE((SELECT CASE WHEN u.cost IS NULL THEN json_object(
                'input_tokens', u.input, 'output_tokens', u.output,
                'cache_read_tokens', u.cache_read, 'cache_write_tokens', u.cache_write)
            ELSE json_object(
                'input_tokens', u.input, 'output_tokens', u.output,
                'cache_read_tokens', u.cache_read, 'cache_write_tokens', u.cache_write,
                'cost_usd', u.cost) END
            FROM backfill_usage u WHERE u.instance_id = conversations.instance_id), '{}')),
        'model_turns', COALESCE((SELECT u.turns FROM backfill_usage u
            WHERE u.instance_id = conversations.instance_id), 0),
        'first_message', (SELECT b.line FROM backfill_messages b
            WHERE b.instance_id = conversations.instance_id ORDER BY b.position LIMIT 1),
        'last_message', (SELECT b.line FROM backfill_messages b
            WHERE b.instance_id = conversations.instance_id ORDER BY b.position DESC LIMIT 1),
        'first_key', (SELECT b.idempotency_key FROM backfill_messages b
            WHERE b.instance_id = conversations.instance_id ORDER BY b.position LIMIT 1),
        'failed', json(COALESCE((SELECT CASE json_extract(b.settlement, '$.outcome')
                WHEN 'failed' THEN 'true' ELSE 'false' END
            FROM backfill_messages b
            WHERE b.instance_id = conversations.instance_id AND b.state = 'settled'
                AND json_valid(b.settlement)
            ORDER BY b.position DESC LIMIT 1), 'false')));
    CREATE TEMP TABLE backfill_search AS
        SELECT instance_id, ROW_NUMBER() OVER (ORDER BY instance_id) AS n FROM conversations;
    CREATE INDEX temp.backfill_search_by_instance ON backfill_search (instance_id);
    UPDATE conversations SET search_rowid = (SELECT b.n FROM backfill_search b
        WHERE b.instance_id = conversations.instance_id);
    INSERT INTO conversations_fts (rowid, text)
        SELECT search_rowid, lower(agent || char(10) || id || char(10)
            || COALESCE(json_extract(summary, '$.first_message'), ''))
        FROM conversations;
    DROP TABLE temp.backfill_usage;
    DROP TABLE temp.backfill_messages;
    DROP TABLE temp.backfill_search;";

/// The shortest word the trigram index finds; shorter ones are matched on the row.
const TRIGRAM: usize = 3;

/// Writes a new conversation's summary and its search entry.
pub(super) fn created(
    tx: &Transaction<'_>,
    key: &ConversationKey,
    summary: &Summary,
) -> Result<()> {
    tx.prepare_cached("INSERT INTO conversations_fts (text) VALUES (?1)")
        .and_then(|mut insert| insert.execute(params![summary.search_text(key)]))
        .map_err(store_error("cannot index the conversation"))?;
    let rowid = tx.last_insert_rowid();
    let json = summary.to_json()?;
    tx.prepare_cached(
        "UPDATE conversations SET summary = ?2, search_rowid = ?3 WHERE instance_id = ?1",
    )
    .and_then(|mut update| update.execute(params![key.instance_id(), json, rowid]))
    .map_err(store_error("cannot write the conversation's summary"))?;
    Ok(())
}

/// Changes a conversation's summary in the caller's transaction (a conversation without one
/// yet is left alone: the migration gives every conversation one).
pub(super) fn update(
    tx: &Transaction<'_>,
    instance_id: &str,
    change: impl FnOnce(&mut Summary),
) -> Result<()> {
    let json: Option<Option<String>> = tx
        .prepare_cached("SELECT summary FROM conversations WHERE instance_id = ?1")
        .and_then(|mut select| {
            select
                .query_row(params![instance_id], |row| row.get(0))
                .optional()
        })
        .map_err(store_error("cannot read the conversation's summary"))?;
    let Some(Some(json)) = json else {
        return Ok(());
    };
    let mut summary = Summary::from_json(&json);
    change(&mut summary);
    let json = summary.to_json()?;
    tx.prepare_cached("UPDATE conversations SET summary = ?2 WHERE instance_id = ?1")
        .and_then(|mut update| update.execute(params![instance_id, json]))
        .map_err(store_error("cannot write the conversation's summary"))?;
    Ok(())
}

/// Removes a conversation's search entry (before its row goes).
pub(super) fn deleted(tx: &Transaction<'_>, instance_id: &str) -> Result<()> {
    tx.prepare_cached(
        "DELETE FROM conversations_fts WHERE rowid =
         (SELECT search_rowid FROM conversations WHERE instance_id = ?1)",
    )
    .and_then(|mut delete| delete.execute(params![instance_id]))
    .map_err(store_error("cannot remove the conversation from the index"))?;
    Ok(())
}

impl SqliteStore {
    /// A page of conversations as `query` asks, most recently active first.
    pub(super) fn list_page(&self, query: &ListingQuery) -> Result<Vec<ListedConversation>> {
        let mut filters = Vec::new();
        let mut values: Vec<Value> = Vec::new();
        if let Some(agent) = &query.agent {
            values.push(Value::Text(agent.clone()));
            filters.push(format!("c.agent = ?{}", values.len()));
        }
        if let Some(before) = &query.before {
            values.push(Value::Integer(
                i64::try_from(before.last_activity).unwrap_or(i64::MAX),
            ));
            values.push(Value::Text(before.instance_id.clone()));
            filters.push(format!(
                "(c.last_activity, c.instance_id) < (?{}, ?{})",
                values.len() - 1,
                values.len()
            ));
        }
        let (indexed, short): (Vec<&String>, Vec<&String>) = query
            .words
            .iter()
            .partition(|word| word.chars().count() >= TRIGRAM);
        if !indexed.is_empty() {
            let phrases: Vec<String> = indexed
                .iter()
                .map(|word| format!("\"{}\"", word.replace('"', "\"\"")))
                .collect();
            values.push(Value::Text(phrases.join(" AND ")));
            filters.push(format!(
                "c.search_rowid IN (SELECT rowid FROM conversations_fts \
                 WHERE conversations_fts MATCH ?{})",
                values.len()
            ));
        }
        for word in short {
            values.push(Value::Text(word.clone()));
            filters.push(format!(
                "instr(lower(c.agent || char(10) || c.id || char(10) || \
                 COALESCE(json_extract(c.summary, '$.first_message'), '')), ?{}) > 0",
                values.len()
            ));
        }
        values.push(Value::Integer(
            i64::try_from(query.limit.min(MAX_LISTING_LIMIT)).unwrap_or(0),
        ));
        let filter = if filters.is_empty() {
            "1 = 1".to_owned()
        } else {
            filters.join(" AND ")
        };
        let sql = format!(
            "SELECT c.agent, c.id, c.created_at, c.last_activity, c.summary,
                (SELECT COUNT(*) FROM submissions s WHERE s.instance_id = c.instance_id
                 AND s.state != 'settled' AND s.state = 'waiting'),
                (SELECT COUNT(*) FROM submissions s WHERE s.instance_id = c.instance_id
                 AND s.state != 'settled')
             FROM conversations c WHERE {filter}
             ORDER BY c.last_activity DESC, c.instance_id DESC LIMIT ?{}",
            values.len()
        );
        let connection = self.reader();
        let managed = connection
            .prepare_cached(&sql)
            .and_then(|mut select| {
                select
                    .query_map(params_from_iter(values), listed_from_row)?
                    .collect()
            })
            .map_err(store_error("cannot list conversations"))?;
        let unmanaged = unmanaged_page(&connection, query)?;
        Ok(merge_page(managed, unmanaged, query.limit))
    }

    /// How many conversations the store holds.
    pub(super) fn count(&self) -> Result<u64> {
        count_in(&self.reader())
    }
}

/// The root sessions no conversation row manages (see [`ListedConversation::unmanaged`]) that
/// `query` admits, most recent first, at most a page: read from the index of the root
/// sessions not marked `managed` (an admission that creates a conversation marks its root),
/// so it costs what those few hold, not the store.
fn unmanaged_page(
    connection: &Connection,
    query: &ListingQuery,
) -> Result<Vec<ListedConversation>> {
    let mut filters = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    if let Some(agent) = &query.agent {
        values.push(Value::Text(format!("{agent}:")));
        filters.push(format!(
            "substr(s.instance_id, 1, length(?{n})) = ?{n}",
            n = values.len()
        ));
    }
    if let Some(before) = &query.before {
        values.push(Value::Integer(
            i64::try_from(before.last_activity).unwrap_or(i64::MAX),
        ));
        values.push(Value::Text(before.instance_id.clone()));
        filters.push(format!(
            "(s.updated_at, s.instance_id) < (?{}, ?{})",
            values.len() - 1,
            values.len()
        ));
    }
    for word in &query.words {
        values.push(Value::Text(word.clone()));
        filters.push(format!(
            "instr(lower(s.instance_id), ?{}) > 0",
            values.len()
        ));
    }
    values.push(Value::Integer(
        i64::try_from(query.limit.min(MAX_LISTING_LIMIT)).unwrap_or(0),
    ));
    let sql = format!(
        "SELECT s.instance_id, s.created_at, s.updated_at, s.version FROM sessions s
         WHERE s.session = 'default' AND s.managed IS NULL AND instr(s.instance_id, ':') > 0
             AND NOT EXISTS (SELECT 1 FROM conversations c WHERE c.instance_id = s.instance_id)
             {}
         ORDER BY s.updated_at DESC, s.instance_id DESC LIMIT ?{}",
        filters
            .iter()
            .map(|filter| format!("AND {filter} "))
            .collect::<String>(),
        values.len()
    );
    let rows: Vec<(String, u64, u64, u64)> = connection
        .prepare_cached(&sql)
        .and_then(|mut select| {
            select
                .query_map(params_from_iter(values), |row| {
                    Ok((
                        row.get(0)?,
                        get_u64(row, 1)?,
                        get_u64(row, 2)?,
                        get_u64(row, 3)?,
                    ))
                })?
                .collect()
        })
        .map_err(store_error("cannot list sessions"))?;
    Ok(rows
        .into_iter()
        .filter_map(|(instance_id, created_at, updated_at, version)| {
            ListedConversation::unmanaged(&instance_id, created_at, updated_at, version)
        })
        .collect())
}

fn count_in(connection: &Connection) -> Result<u64> {
    connection
        .prepare_cached("SELECT COUNT(*) FROM conversations")
        .and_then(|mut select| select.query_row([], |row| get_u64(row, 0)))
        .map_err(store_error("cannot count conversations"))
}

fn listed_from_row(row: &Row<'_>) -> rusqlite::Result<ListedConversation> {
    let summary = row
        .get::<_, Option<String>>(4)?
        .map(|json| Summary::from_json(&json))
        .unwrap_or_default();
    let waiting = get_u64(row, 5)?;
    let pending = get_u64(row, 6)?;
    Ok(ListedConversation::new(
        ConversationKey::new(row.get::<_, String>(0)?, row.get::<_, String>(1)?),
        get_u64(row, 2)?,
        get_u64(row, 3)?,
        ListedStatus::of(waiting, pending - waiting.min(pending), summary.failed),
        pending,
        summary,
    ))
}
