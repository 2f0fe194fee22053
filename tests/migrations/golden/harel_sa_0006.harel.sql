BEGIN;

-- Running upgrade harel_sa_0005 -> harel_sa_0006

UPDATE harel_transport_alembic_version SET version_num='harel_sa_0006' WHERE harel_transport_alembic_version.version_num = 'harel_sa_0005';

COMMIT;

