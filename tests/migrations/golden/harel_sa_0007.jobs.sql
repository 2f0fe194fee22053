BEGIN;

-- Running upgrade harel_sa_0006 -> harel_sa_0007

CREATE TABLE IF NOT EXISTS jobs_transport_scheduled (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id TEXT NOT NULL,
    event TEXT NOT NULL,
    due_at REAL NOT NULL,
    priority INTEGER DEFAULT 0 NOT NULL,
    routing_key TEXT,
    message_key TEXT
);

CREATE INDEX IF NOT EXISTS jobs_transport_scheduled_by_due ON jobs_transport_scheduled (due_at);

CREATE INDEX IF NOT EXISTS jobs_transport_scheduled_by_key ON jobs_transport_scheduled (message_key) WHERE message_key IS NOT NULL;

ALTER TABLE jobs_transport_messages ADD COLUMN message_key TEXT;

CREATE INDEX IF NOT EXISTS jobs_transport_messages_by_key ON jobs_transport_messages (message_key) WHERE message_key IS NOT NULL;

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0007' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0006';

COMMIT;

