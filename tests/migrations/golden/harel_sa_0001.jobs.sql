BEGIN;

CREATE TABLE jobs_transport_alembic_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT jobs_transport_alembic_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> harel_sa_0001

CREATE TABLE IF NOT EXISTS jobs_transport_messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id TEXT NOT NULL,
    event TEXT NOT NULL,
    locked_by TEXT,
    lock_expiry REAL
);

CREATE TABLE IF NOT EXISTS jobs_transport_groups (
    group_id TEXT,
    last_claimed_at REAL DEFAULT 0.0 NOT NULL,
    priority INTEGER DEFAULT 0 NOT NULL,
    PRIMARY KEY (group_id)
);

CREATE INDEX IF NOT EXISTS jobs_transport_groups_by_last_claimed ON jobs_transport_groups (last_claimed_at);

CREATE INDEX IF NOT EXISTS jobs_transport_messages_by_group ON jobs_transport_messages (group_id, seq);

INSERT OR IGNORE INTO jobs_transport_groups (group_id) SELECT DISTINCT group_id FROM jobs_transport_messages;

INSERT INTO jobs_transport_alembic_version (version_num) VALUES ('harel_sa_0001') RETURNING version_num;

COMMIT;

