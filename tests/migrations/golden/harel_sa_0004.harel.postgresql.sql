BEGIN;

-- Running upgrade harel_sa_0003 -> harel_sa_0004

COMMIT;

SET lock_timeout = '1s';

SET statement_timeout = '15min';

CREATE INDEX CONCURRENTLY IF NOT EXISTS harel_transport_groups_by_priority ON harel_transport_groups (priority, last_claimed_at) WHERE priority > 0;

RESET lock_timeout;

RESET statement_timeout;

BEGIN;

UPDATE harel_transport_alembic_version SET version_num='harel_sa_0004' WHERE harel_transport_alembic_version.version_num = 'harel_sa_0003';

COMMIT;

