BEGIN;

-- Running upgrade harel_sa_0001 -> harel_sa_0002

ALTER TABLE harel_transport_groups ADD COLUMN IF NOT EXISTS routing_key TEXT;

CREATE INDEX IF NOT EXISTS harel_transport_groups_by_routing_key ON harel_transport_groups (routing_key, last_claimed_at);

UPDATE harel_transport_alembic_version SET version_num='harel_sa_0002' WHERE harel_transport_alembic_version.version_num = 'harel_sa_0001';

COMMIT;

