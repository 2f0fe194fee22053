BEGIN;

-- Running upgrade harel_sa_0009 -> harel_sa_0010

ALTER TABLE jobs_transport_groups ADD COLUMN max_in_flight INTEGER;

ALTER TABLE jobs_transport_scheduled ADD COLUMN max_in_flight INTEGER;

ALTER TABLE jobs_transport_dead ADD COLUMN max_in_flight INTEGER;

UPDATE jobs_transport_alembic_version SET version_num='harel_sa_0010' WHERE jobs_transport_alembic_version.version_num = 'harel_sa_0009';

COMMIT;

