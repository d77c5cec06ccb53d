#!/usr/bin/env bash
# Start (idempotently) a PostgreSQL 15 server for the metadata-store contract tests, using
# the machine's Debian packages, and print the export line for `eval`:
#     eval "$(scripts/ci-postgres.sh)"
# Everything but the final export goes to stderr. Needs root (or the postgres user's rights).
set -euo pipefail

VERSION=${PG_VERSION:-15}
CLUSTER=${PG_CLUSTER:-main}
DB=${TIERCOMPACT_PG_DB:-tiercompact_test}
USER_NAME=${TIERCOMPACT_PG_USER:-tiercompact}
PASSWORD=${TIERCOMPACT_PG_PASSWORD:-tiercompact}
BIN=/usr/lib/postgresql/$VERSION/bin

log() { echo "ci-postgres: $*" >&2; }

if [ ! -x "$BIN/postgres" ]; then
    log "installing postgresql-$VERSION"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "postgresql-$VERSION" >&2 || apt-get install -y -qq postgresql >&2
fi

if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$VERSION $CLUSTER"; then
    log "creating cluster $VERSION/$CLUSTER"
    pg_createcluster "$VERSION" "$CLUSTER" >&2
fi

PORT=$(pg_lsclusters -h | awk -v v="$VERSION" -v c="$CLUSTER" '$1==v && $2==c {print $3}')
STATUS=$(pg_lsclusters -h | awk -v v="$VERSION" -v c="$CLUSTER" '$1==v && $2==c {print $4}')
if [ "$STATUS" != "online" ]; then
    log "starting cluster $VERSION/$CLUSTER on port $PORT"
    pg_ctlcluster "$VERSION" "$CLUSTER" start >&2
fi

for _ in $(seq 1 30); do
    if runuser -u postgres -- psql -p "$PORT" -qAtc "select 1" >/dev/null 2>&1; then break; fi
    sleep 1
done

psql_admin() { runuser -u postgres -- psql -p "$PORT" -v ON_ERROR_STOP=1 -qAt "$@"; }

if [ "$(psql_admin -c "select 1 from pg_roles where rolname='$USER_NAME'")" != "1" ]; then
    log "creating role $USER_NAME"
    psql_admin -c "create role \"$USER_NAME\" login password '$PASSWORD'" >&2
else
    psql_admin -c "alter role \"$USER_NAME\" with login password '$PASSWORD'" >&2
fi
if [ "$(psql_admin -c "select 1 from pg_database where datname='$DB'")" != "1" ]; then
    log "creating database $DB"
    psql_admin -c "create database \"$DB\" owner \"$USER_NAME\"" >&2
fi

echo "export TIERCOMPACT_TEST_POSTGRES_URL=postgresql://$USER_NAME:$PASSWORD@127.0.0.1:$PORT/$DB"
