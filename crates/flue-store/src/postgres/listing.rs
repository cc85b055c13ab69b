//! Conversation listings for [`PostgresStore`] (migration 4): each conversation row carries its
//! last write (`last_activity`, indexed most recent first, alone and per agent), its
//! [`Summary`] as JSON and the lowercased text a search looks in, all updated by the write they
//! summarize in the same transaction. A database of an earlier version gets its summaries
//! computed from its rows once, in bulk, by the migration.

use deadpool_postgres::{GenericClient, Transaction};
use flue_core::store::listing::{
    ListedConversation, ListedStatus, ListingQuery, MAX_LISTING_LIMIT, Summary, merge_page,
};
use flue_core::{ConversationKey, Result};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::{PostgresStore, execute, int, query_all, query_one, query_opt, uint};

/// Migration 4: the columns and indexes, and every existing conversation's summary and
/// search text computed from its rows in bulk (usage summed from its records' JSON, its first
/// and last message from its submissions, its last outcome from its last settlement), so that
/// an earlier database lists like a new one from the migration on.
pub(super) const MIGRATION: &str = "
    ALTER TABLE flue_conversations ADD COLUMN last_activity BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE flue_conversations ADD COLUMN summary TEXT;
    ALTER TABLE flue_conversations ADD COLUMN search_text TEXT NOT NULL DEFAULT '';
    CREATE INDEX flue_conversations_by_activity
        ON flue_conversations (last_activity, instance_id COLLATE \"C\");
    CREATE INDEX flue_conversations_by_agent_activity
        ON flue_conversations (agent, last_activity, instance_id COLLATE \"C\");
    ALTER TABLE flue_sessions ADD COLUMN managed BOOLEAN;
    UPDATE flue_sessions SET managed = TRUE WHERE session = 'default'
        AND instance_id IN (SELECT instance_id FROM flue_conversations);
    CREATE INDEX flue_sessions_unmanaged_roots
        ON flue_sessions (updated_at, instance_id COLLATE \"C\")
        WHERE session = 'default' AND managed IS NULL;
    UPDATE flue_conversations c SET last_activity = GREATEST(c.created_at, COALESCE(
        (SELECT s.at FROM flue_stream s WHERE s.instance_id = c.instance_id
         ORDER BY s.seq DESC LIMIT 1), 0));
    CREATE TEMP TABLE flue_backfill_usage ON COMMIT DROP AS
        SELECT instance_id,
            SUM(COALESCE((record::jsonb #>> '{usage,input_tokens}')::BIGINT, 0)) AS input,
            SUM(COALESCE((record::jsonb #>> '{usage,output_tokens}')::BIGINT, 0)) AS output,
            SUM(COALESCE((record::jsonb #>> '{usage,cache_read_tokens}')::BIGINT, 0))
                AS cache_read,
            SUM(COALESCE((record::jsonb #>> '{usage,cache_write_tokens}')::BIGINT, 0))
                AS cache_write,
            SUM((record::jsonb #>> '{usage,cost_usd}')::DOUBLE PRECISION) AS cost,
            COUNT(*) FILTER (WHERE record::jsonb ->> 'type' IN ('assistant', 'failed_turn'))
                AS turns
        FROM flue_records
        WHERE record::jsonb ->> 'type' IN ('assistant', 'failed_turn', 'sampling')
        GROUP BY instance_id;
    CREATE TEMP TABLE flue_backfill_messages ON COMMIT DROP AS
        SELECT instance_id, position, idempotency_key, state,
            settlement::jsonb ->> 'outcome' AS outcome,
            left(CASE message::jsonb ->> 'kind'
                WHEN 'signal' THEN (message::jsonb ->> 'type') || ': '
                    || (message::jsonb ->> 'body')
                ELSE message::jsonb ->> 'body' END, 200) AS line
        FROM flue_submissions;
    CREATE INDEX ON flue_backfill_messages (instance_id, position);
    UPDATE flue_conversations c SET summary = jsonb_strip_nulls(jsonb_build_object(
        'messages', COALESCE((SELECT version FROM flue_sessions
            WHERE instance_id = c.instance_id AND session = 'default'), 0),
        'sessions', GREATEST(1, (SELECT COUNT(*) FROM flue_sessions
            WHERE instance_id = c.instance_id)),
        'usage', COALESCE((SELECT jsonb_strip_nulls(jsonb_build_object(
                'input_tokens', u.input, 'output_tokens', u.output,
                'cache_read_tokens', u.cache_read, 'cache_write_tokens', u.cache_write,
                'cost_usd', u.cost))
            FROM flue_backfill_usage u WHERE u.instance_id = c.instance_id), '{}'::jsonb),
        'model_turns', COALESCE((SELECT u.turns FROM flue_backfill_usage u
            WHERE u.instance_id = c.instance_id), 0),
        'first_message', (SELECT b.line FROM flue_backfill_messages b
            WHERE b.instance_id = c.instance_id ORDER BY b.position LIMIT 1),
        'last_message', (SELECT b.line FROM flue_backfill_messages b
            WHERE b.instance_id = c.instance_id ORDER BY b.position DESC LIMIT 1),
        'first_key', (SELECT b.idempotency_key FROM flue_backfill_messages b
            WHERE b.instance_id = c.instance_id ORDER BY b.position LIMIT 1),
        'failed', COALESCE((SELECT b.outcome = 'failed' FROM flue_backfill_messages b
            WHERE b.instance_id = c.instance_id AND b.state = 'settled'
            ORDER BY b.position DESC LIMIT 1), FALSE)))::TEXT;
    UPDATE flue_conversations SET search_text = lower(agent || E'\\n' || id || E'\\n'
        || COALESCE(summary::jsonb ->> 'first_message', ''));";

/// Writes a new conversation's summary and search text.
pub(super) async fn created(
    tx: &Transaction<'_>,
    key: &ConversationKey,
    summary: &Summary,
) -> Result<()> {
    execute(
        tx,
        "UPDATE flue_conversations SET summary = $2, search_text = $3 WHERE instance_id = $1",
        &[
            &key.instance_id(),
            &summary.to_json()?,
            &summary.search_text(key),
        ],
        "cannot write the conversation's summary",
    )
    .await?;
    Ok(())
}

/// Changes a conversation's summary in the caller's transaction (the row is locked already;
/// one without a summary is left alone: the migration gives every conversation one).
pub(super) async fn update(
    tx: &Transaction<'_>,
    instance_id: &str,
    change: impl FnOnce(&mut Summary) + Send,
) -> Result<()> {
    let row = query_opt(
        tx,
        "SELECT summary FROM flue_conversations WHERE instance_id = $1",
        &[&instance_id],
        "cannot read the conversation's summary",
    )
    .await?;
    let Some(json) = row.and_then(|row| row.get::<_, Option<String>>(0)) else {
        return Ok(());
    };
    let mut summary = Summary::from_json(&json);
    change(&mut summary);
    execute(
        tx,
        "UPDATE flue_conversations SET summary = $2 WHERE instance_id = $1",
        &[&instance_id, &summary.to_json()?],
        "cannot write the conversation's summary",
    )
    .await?;
    Ok(())
}

impl PostgresStore {
    /// A page of conversations as `query` asks, most recently active first.
    pub(super) async fn list_page(&self, query: &ListingQuery) -> Result<Vec<ListedConversation>> {
        let mut filters = Vec::new();
        let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        if let Some(agent) = &query.agent {
            values.push(Box::new(agent.clone()));
            filters.push(format!("c.agent = ${}", values.len()));
        }
        if let Some(before) = &query.before {
            values.push(Box::new(int(before.last_activity)));
            values.push(Box::new(before.instance_id.clone()));
            filters.push(format!(
                "(c.last_activity, c.instance_id COLLATE \"C\") < (${}, ${} COLLATE \"C\")",
                values.len() - 1,
                values.len()
            ));
        }
        for word in &query.words {
            values.push(Box::new(word.clone()));
            filters.push(format!("strpos(c.search_text, ${}) > 0", values.len()));
        }
        values.push(Box::new(int(query.limit.min(MAX_LISTING_LIMIT) as u64)));
        let filter = if filters.is_empty() {
            "TRUE".to_owned()
        } else {
            filters.join(" AND ")
        };
        let sql = format!(
            "SELECT c.agent, c.id, c.created_at, c.last_activity, c.summary,
                (SELECT COUNT(*) FROM flue_submissions s WHERE s.instance_id = c.instance_id
                 AND s.state <> 'settled' AND s.state = 'waiting'),
                (SELECT COUNT(*) FROM flue_submissions s WHERE s.instance_id = c.instance_id
                 AND s.state <> 'settled')
             FROM flue_conversations c WHERE {filter}
             ORDER BY c.last_activity DESC, c.instance_id COLLATE \"C\" DESC LIMIT ${}",
            values.len()
        );
        let params: Vec<&(dyn ToSql + Sync)> = values
            .iter()
            .map(|value| value.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let client = self.client().await?;
        let rows = query_all(&client, &sql, &params, "cannot list conversations").await?;
        let managed = rows.iter().map(listed_from_row).collect();
        let unmanaged = unmanaged_page(&client, query).await?;
        Ok(merge_page(managed, unmanaged, query.limit))
    }

    /// How many conversations the database holds.
    pub(super) async fn count(&self) -> Result<u64> {
        let client = self.client().await?;
        count_in(&client).await
    }
}

/// The root sessions no conversation row manages (see [`ListedConversation::unmanaged`]) that
/// `query` admits, most recent first, at most a page, from the index of the root sessions not
/// marked `managed` (an admission that creates a conversation marks its root).
async fn unmanaged_page<C: GenericClient + Sync>(
    client: &C,
    query: &ListingQuery,
) -> Result<Vec<ListedConversation>> {
    let mut filters = String::new();
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    if let Some(agent) = &query.agent {
        values.push(Box::new(format!("{agent}:")));
        filters.push_str(&format!(
            " AND left(s.instance_id, length(${n})) = ${n}",
            n = values.len()
        ));
    }
    if let Some(before) = &query.before {
        values.push(Box::new(int(before.last_activity)));
        values.push(Box::new(before.instance_id.clone()));
        filters.push_str(&format!(
            " AND (s.updated_at, s.instance_id COLLATE \"C\") \
             < (${}, ${} COLLATE \"C\")",
            values.len() - 1,
            values.len()
        ));
    }
    for word in &query.words {
        values.push(Box::new(word.clone()));
        filters.push_str(&format!(
            " AND strpos(lower(s.instance_id), ${}) > 0",
            values.len()
        ));
    }
    values.push(Box::new(int(query.limit.min(MAX_LISTING_LIMIT) as u64)));
    let sql = format!(
        "SELECT s.instance_id, s.created_at, s.updated_at, s.version FROM flue_sessions s
         WHERE s.session = 'default' AND s.managed IS NULL AND strpos(s.instance_id, ':') > 0
             AND NOT EXISTS (SELECT 1 FROM flue_conversations c
                 WHERE c.instance_id = s.instance_id){filters}
         ORDER BY s.updated_at DESC, s.instance_id COLLATE \"C\" DESC
         LIMIT ${}",
        values.len()
    );
    let params: Vec<&(dyn ToSql + Sync)> = values
        .iter()
        .map(|value| value.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let rows = query_all(client, &sql, &params, "cannot list sessions").await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            ListedConversation::unmanaged(
                row.get::<_, &str>(0),
                uint(row.get(1)),
                uint(row.get(2)),
                uint(row.get(3)),
            )
        })
        .collect())
}

async fn count_in<C: GenericClient + Sync>(client: &C) -> Result<u64> {
    Ok(uint(
        query_one(
            client,
            "SELECT COUNT(*) FROM flue_conversations",
            &[],
            "cannot count conversations",
        )
        .await?
        .get(0),
    ))
}

fn listed_from_row(row: &Row) -> ListedConversation {
    let summary = row
        .get::<_, Option<String>>(4)
        .map(|json| Summary::from_json(&json))
        .unwrap_or_default();
    let waiting = uint(row.get(5));
    let pending = uint(row.get(6));
    ListedConversation::new(
        ConversationKey::new(row.get::<_, String>(0), row.get::<_, String>(1)),
        uint(row.get(2)),
        uint(row.get(3)),
        ListedStatus::of(waiting, pending - waiting.min(pending), summary.failed),
        pending,
        summary,
    )
}
