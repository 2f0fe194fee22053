BEGIN;

-- Running upgrade harel_sa_0009 -> harel_sa_0010

COMMIT;

SET lock_timeout = '1s';

SET statement_timeout = '15min';

ALTER TABLE harel_transport_groups ADD COLUMN IF NOT EXISTS max_in_flight BIGINT;

ALTER TABLE harel_transport_scheduled ADD COLUMN IF NOT EXISTS max_in_flight BIGINT;

ALTER TABLE harel_transport_dead ADD COLUMN IF NOT EXISTS max_in_flight BIGINT;

RESET lock_timeout;

RESET statement_timeout;

BEGIN;

UPDATE harel_transport_alembic_version SET version_num='harel_sa_0010' WHERE harel_transport_alembic_version.version_num = 'harel_sa_0009';

COMMIT;

