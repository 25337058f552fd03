#!/usr/bin/env bash
# Real Redis, PostgreSQL and Kafka for seckill's tests, without Docker.
#
# Each service is a private process bound to 127.0.0.1 on a non-default port,
# with all of its state under one directory, so it never collides with (or
# depends on) the machine's own redis/postgresql services. `make test` calls
# `up` every time: it must be idempotent and fast when things already run.
#
# Run `deploy/local/services.sh help` for the subcommands.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SCRIPT="$REPO/deploy/local/services.sh" # the watchdog runs it again
DIR=${SECKILL_SERVICES_DIR:-$REPO/.seckill-services}
DIR=$(realpath -m "$DIR") # absolute: it ends up in config files

HOST=127.0.0.1
# Overridable so that a test can run a private set of servers (other ports,
# another SECKILL_SERVICES_DIR) beside the shared one, and stop or kill them
# without disturbing the tests that run on the shared set.
REDIS_PORT=${SECKILL_REDIS_PORT:-16379}
PG_PORT=${SECKILL_POSTGRES_PORT:-15432}
KAFKA_PORT=${SECKILL_KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${SECKILL_KAFKA_CONTROLLER_PORT:-19093}
# The replicated topologies, started on demand (`start redis-cluster`…): each takes a run of
# consecutive ports from its base.
CLUSTER_PORT=${SECKILL_REDIS_CLUSTER_PORT:-17000}   # 6 nodes: 3 primaries, 3 replicas
SENTINEL_PORT=${SECKILL_REDIS_SENTINEL_PORT:-17100} # primary, replica, 3 sentinels
KAFKA3_PORT=${SECKILL_KAFKA3_PORT:-19200}           # 3 brokers, then their 3 controllers
for port in "$REDIS_PORT" "$PG_PORT" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$CLUSTER_PORT" "$SENTINEL_PORT" "$KAFKA3_PORT"; do
  [[ $port =~ ^[0-9]+$ ]] || { printf 'services.sh: port %q is not a number\n' "$port" >&2; exit 2; }
done

# What the tests read (see `env`). The PostgreSQL bootstrap superuser *is*
# seckill, so there is only one role and one password to know about.
REDIS_URL="redis://$HOST:$REDIS_PORT/0"
PG_URL="postgres://seckill:seckill@$HOST:$PG_PORT/seckill?sslmode=disable"
KAFKA_BROKERS="$HOST:$KAFKA_PORT"

KAFKA_POM="$REPO/deploy/local/kafka/pom.xml"
KAFKA_VERSION=$(sed -n 's:.*<kafka\.version>\(.*\)</kafka\.version>.*:\1:p' "$KAFKA_POM")
# Jars live outside the repo so that `clean` and fresh checkouts reuse them.
KAFKA_HOME="${XDG_CACHE_HOME:-${HOME:?HOME must be set}/.cache}/seckill/kafka-$KAFKA_VERSION"
KAFKA_LIBS="$KAFKA_HOME/libs"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"

# Timeouts (seconds) for a service to answer after being started. Kafka is
# generous because a cold JVM on a 2-core CI machine is slow.
REDIS_TIMEOUT=${SECKILL_REDIS_TIMEOUT:-20}
PG_TIMEOUT=${SECKILL_POSTGRES_TIMEOUT:-60}
KAFKA_TIMEOUT=${SECKILL_KAFKA_TIMEOUT:-120}

log() { printf '%s\n' "$*"; }
die() { printf 'services.sh: %s\n' "$*" >&2; exit 1; }

# Print the end of a log file to stderr, for "did not come up" errors.
show_tail() {
  local file=$1
  if [[ -s $file ]]; then
    printf -- '----- last 40 lines of %s -----\n' "$file" >&2
    tail -n 40 "$file" >&2
    printf -- '-----\n' >&2
  else
    printf '(%s is empty or missing)\n' "$file" >&2
  fi
}

# Is the process in a pid file alive, and still the program we started? A pid
# file left by a crash or a reboot may name an unrelated process by now, which
# `down` must not kill.
pid_alive() { # pidfile what-its-command-line-contains
  local pid
  [[ -s $1 ]] || return 1
  pid=$(<"$1")
  # A stale pid can be a thread of a live process by now: kill -0 and /proc/PID answer for a
  # thread id too, with its process's command line. A JVM's threads take the ids after its
  # own, so a Kafka node's old pid read as a thread of the Kafka started after it, and the
  # node was never started again ("kafka3: not ready after 120s"). Only a process counts.
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
    grep -qx "Tgid:[[:space:]]*$pid" "/proc/$pid/status" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# Is something accepting TCP connections on $HOST:port? (bash's /dev/tcp)
port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Is a pid gone? A zombie counts as gone: a killed server whose parent does not
# reap it (PID 1 in some containers) has exited all the same.
pid_gone() {
  ! kill -0 "$1" 2>/dev/null || [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]]
}

# Wait until a pid has exited (up to $2 seconds). Returns 1 on timeout.
wait_exit() { # pid seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    pid_gone "$1" && return 0
    sleep 0.1
  done
  return 1
}

# SIGKILL the process in a pid file, as a crash or the OOM killer would: no
# flush, no clean shutdown. For the fault tests.
kill_pidfile() { # service pidfile what-its-command-line-contains
  local pid
  if ! pid_alive "$2" "$3"; then
    log "$1: not running from $DIR; nothing to kill"
    return
  fi
  pid=$(<"$2")
  log "$1: killing (pid $pid, SIGKILL)"
  kill -9 "$pid"
  wait_exit "$pid" 10 || die "$1: pid $pid survived SIGKILL"
}

# ---------------------------------------------------------------- packages --

pg_bindir() {
  # Newest installed major version (Debian allows several side by side).
  local d
  # shellcheck disable=SC2012 # plain directory names; sort -V orders 9.6 < 15
  d=$(ls -1d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -V | tail -n 1 || true)
  [[ -n $d && -x $d/initdb ]] && printf '%s\n' "$d"
}

# A fresh CI machine has none of this; a developer's machine usually has it
# all, in which case we must not touch apt (slow, and needs root).
ensure_packages() {
  local -a pkgs=()
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || pkgs+=(redis-server)
  { pg_bindir >/dev/null && command -v psql >/dev/null; } || pkgs+=(postgresql)
  command -v kcat >/dev/null || pkgs+=(kcat)
  command -v "$JAVA" >/dev/null || pkgs+=(default-jre-headless)
  command -v mvn >/dev/null || pkgs+=(maven)
  # The console's browser test drives Chromium; the alert rules' tests run promtool.
  command -v chromium >/dev/null || pkgs+=(chromium fonts-liberation)
  command -v promtool >/dev/null || pkgs+=(prometheus)
  ((${#pkgs[@]})) || return 0

  local -a sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || die "missing packages: ${pkgs[*]}; install them as root: apt-get install -y ${pkgs[*]}"
    sudo=(sudo -n)
  fi
  log "packages: installing ${pkgs[*]} (apt-get)..."
  local start=$SECONDS
  # noninteractive + confold: CI has no stdin and must never stop at a prompt.
  # Installing postgresql/redis-server also starts the *system* services on
  # 5432/6379; harmless, ours use other ports and directories. Where systemd
  # runs, prometheus starts a server on 9090, the port of the roles' default --metrics-addr:
  # the tests give theirs 127.0.0.1:0; by hand, pick another or stop it.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${pkgs[@]}" >/dev/null
  log "packages: installed in $((SECONDS - start))s"
}

# ------------------------------------------------------------------- redis --

REDIS_DIR="$DIR/redis"
REDIS_PID="$REDIS_DIR/redis.pid"
REDIS_LOG="$REDIS_DIR/redis.log"

redis_answers() { [[ $(redis-cli -h $HOST -p $REDIS_PORT ping 2>/dev/null) == PONG ]]; }

redis_up() {
  if redis_answers; then
    log "redis: already running on $HOST:$REDIS_PORT"
    return
  fi
  log "redis: starting..."
  mkdir -p "$REDIS_DIR"
  # AOF with everysec is what production runs (the Lua scripts' effects must
  # survive a restart); RDB snapshots are off so tests never pay for a fork.
  cat >"$REDIS_DIR/redis.conf" <<EOF
# Generated by deploy/local/services.sh; rewritten on every start.
bind $HOST
port $REDIS_PORT
daemonize yes
pidfile "$REDIS_PID"
logfile "$REDIS_LOG"
dir "$REDIS_DIR"
appendonly yes
appendfsync everysec
save ""
EOF
  local start=$SECONDS
  redis-server "$REDIS_DIR/redis.conf" 9>&- || { show_tail "$REDIS_LOG"; die "redis: redis-server failed to start"; }
  until redis_answers; do
    if ((SECONDS - start > REDIS_TIMEOUT)); then
      show_tail "$REDIS_LOG"
      die "redis: not answering on $HOST:$REDIS_PORT after ${REDIS_TIMEOUT}s"
    fi
    sleep 0.2
  done
  log "redis: ready in $((SECONDS - start))s"
}

redis_down() {
  if pid_alive "$REDIS_PID" redis-server; then
    local pid
    pid=$(<"$REDIS_PID")
    log "redis: stopping (pid $pid)..."
    # Plain SHUTDOWN: fsyncs the AOF, so a later `up` sees the same data.
    redis-cli -h $HOST -p $REDIS_PORT shutdown >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
    wait_exit "$pid" 30 || die "redis: pid $pid did not exit"
    log "redis: stopped"
  elif redis_answers; then
    log "redis: something answers on $HOST:$REDIS_PORT but was not started from $DIR; left alone"
  else
    log "redis: not running"
  fi
}

redis_kill() {
  kill_pidfile redis "$REDIS_PID" redis-server
  rm -f "$REDIS_PID"
}

redis_status() {
  if redis_answers; then
    local v
    v=$(redis-cli -h $HOST -p $REDIS_PORT info server 2>/dev/null | tr -d '\r' | sed -n 's/^redis_version://p')
    if pid_alive "$REDIS_PID" redis-server; then
      printf 'redis     up    %s:%s  redis %s, pid %s\n' $HOST $REDIS_PORT "$v" "$(<"$REDIS_PID")"
    else
      printf 'redis     up    %s:%s  redis %s, not started from %s\n' $HOST $REDIS_PORT "$v" "$DIR"
    fi
  else
    printf 'redis     down\n'
  fi
}

# -------------------------------------------------------------- postgresql --

# initdb and postgres refuse to run as root: as root we run them as the
# `postgres` user (created by Debian's package), which therefore has to be able
# to reach the data directory. If an ancestor of $DIR is closed to it (e.g. a
# checkout under /root), the cluster lives under /var/tmp instead, at a path
# derived from $DIR so that every subcommand finds it again.
pg_root() {
  local d="$DIR/postgres"
  if ((EUID == 0)) && id postgres >/dev/null 2>&1; then
    mkdir -p "$d"
    chmod a+x "$DIR"
    chown postgres: "$d"
    if ! runuser -u postgres -- test -w "$d"; then
      d="/var/tmp/seckill-postgres-$(printf '%s' "$DIR" | md5sum | cut -c1-12)"
      mkdir -p "$d"
      chown postgres: "$d"
    fi
  fi
  printf '%s\n' "$d"
}

as_pg() { # run a command as the postgres user when we are root
  if ((EUID == 0)); then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_answers() { pg_isready -q -h $HOST -p $PG_PORT -t 2 2>/dev/null; }

pg_login_ok() { PGCONNECT_TIMEOUT=5 psql "$PG_URL" -XAtqc 'select 1' >/dev/null 2>&1; }

pg_up() {
  local bin root data logf
  if pg_answers; then
    pg_login_ok || die "postgres: something answers on $HOST:$PG_PORT but seckill/seckill cannot log into database seckill (stale cluster from elsewhere? try \`$0 down\` there)"
    log "postgres: already running on $HOST:$PG_PORT"
    return
  fi
  bin=$(pg_bindir) || die "postgres: no /usr/lib/postgresql/*/bin/initdb found"
  root=$(pg_root)
  data="$root/data"
  logf="$root/postgres.log"
  local start=$SECONDS

  if [[ ! -s $data/PG_VERSION ]]; then
    log "postgres: creating cluster in $data ($("$bin/postgres" --version))..."
    rm -rf "$data"
    as_pg mkdir -p "$data"
    local pwfile="$root/.pw"
    printf 'seckill\n' >"$pwfile"
    ((EUID == 0)) && chown postgres: "$pwfile"
    # --no-sync and the C locale: fast, and no dependency on installed locales.
    as_pg "$bin/initdb" -D "$data" -U seckill --pwfile="$pwfile" -E UTF8 --no-locale \
      --auth-host=scram-sha-256 --auth-local=trust --no-sync >"$root/initdb.log" 2>&1 \
      || { rm -f "$pwfile"; show_tail "$root/initdb.log"; die "postgres: initdb failed"; }
    rm -f "$pwfile"
    printf "\ninclude = 'seckill.conf'\n" | as_pg tee -a "$data/postgresql.conf" >/dev/null
  fi

  # Our settings, in their own file so they are easy to find and to change.
  as_pg tee "$data/seckill.conf" >/dev/null <<EOF
# Generated by deploy/local/services.sh; rewritten on every start.
listen_addresses = '$HOST'
port = $PG_PORT
# TCP only: no socket in /var/run/postgresql (may not be writable, and the
# system cluster lives there).
unix_socket_directories = ''
# The tests open many pools in parallel.
max_connections = 300
# A throwaway test database: durability against a power cut is not worth the
# fsyncs (what reached the kernel survives a kill -9 of the server anyway).
fsync = off
full_page_writes = off
# But a commit must be durable once acknowledged, as in production: the fault
# tests kill -9 PostgreSQL, and with synchronous_commit off the last commits
# would vanish from shared memory after the consumer has acted on them.
synchronous_commit = on
EOF

  log "postgres: starting..."
  # pg_ctl detaches the server into its own session; -w waits for it to accept
  # connections (bounded by -t).
  if ! as_pg "$bin/pg_ctl" -D "$data" -l "$logf" -w -t "$PG_TIMEOUT" start >/dev/null 9>&-; then
    show_tail "$logf"
    die "postgres: pg_ctl start failed"
  fi
  until pg_answers; do
    if ((SECONDS - start > PG_TIMEOUT)); then
      show_tail "$logf"
      die "postgres: not answering on $HOST:$PG_PORT after ${PG_TIMEOUT}s"
    fi
    sleep 0.2
  done
  # The database (the role was created by initdb). Idempotent.
  local admin="postgres://seckill:seckill@$HOST:$PG_PORT/postgres?sslmode=disable"
  if [[ $(psql "$admin" -XAtqc "select 1 from pg_database where datname = 'seckill'") != 1 ]]; then
    psql "$admin" -Xqc 'create database seckill' >/dev/null
  fi
  pg_login_ok || { show_tail "$logf"; die "postgres: started, but seckill cannot log in"; }
  log "postgres: ready in $((SECONDS - start))s"
}

pg_down() {
  local bin root data
  bin=$(pg_bindir) || { log "postgres: not installed"; return; }
  root=$(pg_root)
  data="$root/data"
  if [[ -s $data/postmaster.pid ]] && as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    log "postgres: stopping..."
    as_pg "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null || die "postgres: pg_ctl stop failed"
    log "postgres: stopped"
  elif pg_answers; then
    log "postgres: something answers on $HOST:$PG_PORT but was not started from $root; left alone"
  else
    log "postgres: not running"
  fi
}

pg_kill() {
  local data pid child
  local -a children
  data="$(pg_root)/data"
  # The postmaster's pid is the first line of postmaster.pid.
  pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)
  if ! [[ $pid =~ ^[0-9]+$ ]] || pid_gone "$pid" ||
    ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$data"; then
    log "postgres: not running from $data; nothing to kill"
    return
  fi
  # Its backends notice the postmaster's death and exit by themselves, but until
  # they have, the shared memory block is in use and a new postmaster refuses
  # to start: note them now, wait for them below.
  mapfile -t children < <(pgrep -P "$pid" || true)
  log "postgres: killing (pid $pid, SIGKILL)"
  kill -9 "$pid"
  wait_exit "$pid" 10 || die "postgres: pid $pid survived SIGKILL"
  for child in "${children[@]}"; do
    wait_exit "$child" 10 || kill -9 "$child" 2>/dev/null || true
  done
  # A new postmaster tells a stale postmaster.pid from a live one by kill(pid, 0),
  # which a zombie passes, and the dead postmaster stays a zombie until PID 1
  # reaps it (some inits take a second, some never do). It is dead: its lock
  # file goes.
  rm -f "$data/postmaster.pid"
}

pg_status() {
  local root
  if pg_answers; then
    root=$(pg_root)
    if [[ -s $root/data/postmaster.pid ]]; then
      printf 'postgres  up    %s:%s  %s, pid %s\n' $HOST $PG_PORT "$("$(pg_bindir)/postgres" --version)" "$(head -n 1 "$root/data/postmaster.pid")"
    else
      printf 'postgres  up    %s:%s  not started from %s\n' $HOST $PG_PORT "$root"
    fi
  else
    printf 'postgres  down\n'
  fi
}

# ------------------------------------------------------------------- kafka --

KAFKA_DIR="$DIR/kafka"
KAFKA_PID="$KAFKA_DIR/kafka.pid"
KAFKA_LOG="$KAFKA_DIR/server.log"   # log4j output
KAFKA_OUT="$KAFKA_DIR/stdout.log"   # the JVM's own stdout/stderr (crashes, OOM)
KAFKA_DATA="$KAFKA_DIR/data"

# Resolve the broker's jars from Maven Central once, into the home directory.
# The marker holds the pom's checksum: editing the pom re-resolves.
kafka_jars() {
  local marker="$KAFKA_HOME/.complete" sum
  sum=$(sha256sum "$KAFKA_POM" | cut -d' ' -f1)
  if [[ -f $marker && $(<"$marker") == "$sum" ]]; then
    return
  fi
  log "kafka: resolving $KAFKA_VERSION jars with maven (first run only)..."
  local start=$SECONDS tmp="$KAFKA_HOME/libs.tmp.$$"
  mkdir -p "$KAFKA_HOME"
  rm -rf "$tmp"
  # -B: batch mode, CI has no terminal. Into a temporary directory first so an
  # interrupted download never looks complete.
  if ! mvn -B -q -f "$KAFKA_POM" dependency:copy-dependencies -DoutputDirectory="$tmp" \
      >"$KAFKA_HOME/mvn.log" 2>&1; then
    show_tail "$KAFKA_HOME/mvn.log"
    rm -rf "$tmp"
    die "kafka: mvn dependency:copy-dependencies failed"
  fi
  rm -rf "$KAFKA_LIBS"
  mv "$tmp" "$KAFKA_LIBS"
  printf '%s\n' "$sum" >"$marker"
  log "kafka: $(find "$KAFKA_LIBS" -name "*.jar" | wc -l) jars in $KAFKA_LIBS ($((SECONDS - start))s)"
}

kafka_answers() {
  # Cheap TCP probe first: while the port is closed librdkafka backs off
  # between reconnects, and a kcat call would sit out its whole timeout.
  port_open $KAFKA_PORT || return 1
  # kcat is an independent client (librdkafka): the broker must list itself.
  local md
  md=$(kcat -b "$KAFKA_BROKERS" -L -m 2 2>/dev/null) || return 1
  [[ $md == *"at $HOST:$KAFKA_PORT"* ]]
}

# The settings every test broker shares: a KRaft node that is both broker and controller (no
# ZooKeeper), on loopback, with the tests' habits. Replication is the caller's to add.
kafka_node_props() { # node-id voters port controller-port log-dir
  cat <<EOF
process.roles=broker,controller
node.id=$1
controller.quorum.voters=$2
listeners=PLAINTEXT://$HOST:$3,CONTROLLER://$HOST:$4
advertised.listeners=PLAINTEXT://$HOST:$3
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$5
# Fewer internal partitions than the default 50: the first consumer group and
# the first transactional producer of a test run come up faster.
offsets.topic.num.partitions=10
transaction.state.log.num.partitions=10
num.partitions=3
# Tests join groups constantly; don't wait 3s for more members.
group.initial.rebalance.delay.ms=0
# Consumers may ask for a short session (seckill consumer --session-timeout): 2 s hands a
# dead member's partitions on within 3 s; the broker's default floor is 6 s.
group.min.session.timeout.ms=1000
# seckill creates its topics explicitly; a typo must fail, not create a topic.
auto.create.topics.enable=false
EOF
}

kafka_write_config() {
  mkdir -p "$KAFKA_DATA"
  {
    echo "# Generated by deploy/local/services.sh; rewritten on every start."
    kafka_node_props 1 "1@$HOST:$KAFKA_CONTROLLER_PORT" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_DATA"
    cat <<EOF
# A single node cannot replicate: every internal topic gets one replica.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
EOF
  } >"$KAFKA_DIR/server.properties"
  kafka_log_configs "$KAFKA_DIR"
}

# The broker's log4j configuration, and the tools' (which log to stderr), into dir.
kafka_log_configs() { # dir
  cat >"$1/log4j.properties" <<EOF
# Generated by deploy/local/services.sh. reload4j (log4j 1.2 API).
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=$1/server.log
log4j.appender.file.MaxFileSize=20MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
# Per-request and per-partition chatter.
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
EOF
  cat >"$1/tools-log4j.properties" <<EOF
# Generated by deploy/local/services.sh. For StorageTool, TopicCommand...
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
}

# Java options shared by the broker and the tools (which log warnings to
# stderr instead of the broker's log file). `libs/*` is expanded by java.
KAFKA_JVM=(-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError
  -Djava.awt.headless=true -cp "$KAFKA_LIBS/*")
kafka_tool() {
  "$JAVA" -Xmx256m "${KAFKA_JVM[@]}" -Dlog4j.configuration="file:$KAFKA_DIR/tools-log4j.properties" "$@"
}

# Starts the broker and returns without waiting (see kafka_wait), so the JVM
# boots while redis and postgres start.
kafka_start() {
  KAFKA_STARTED=
  if kafka_answers; then
    log "kafka: already running on $KAFKA_BROKERS"
    return
  fi
  if pid_alive "$KAFKA_PID" "$KAFKA_DIR/server.properties"; then
    # Started by an earlier `up` that is still booting, or hung: wait for it.
    log "kafka: pid $(<"$KAFKA_PID") is running but not answering yet; waiting for it"
    KAFKA_STARTED=$SECONDS
    return
  fi
  kafka_jars
  kafka_write_config
  if [[ ! -f $KAFKA_DATA/meta.properties ]]; then
    # KRaft log dirs must be formatted once with a cluster id (22 chars of
    # url-safe base64, what `StorageTool random-uuid` prints).
    local id
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
    log "kafka: formatting $KAFKA_DATA (cluster id $id)..."
    if ! kafka_tool kafka.tools.StorageTool format --ignore-formatted \
        --cluster-id="$id" -c "$KAFKA_DIR/server.properties" >"$KAFKA_DIR/format.log" 2>&1; then
      show_tail "$KAFKA_DIR/format.log"
      die "kafka: StorageTool format failed"
    fi
  fi
  log "kafka: starting $KAFKA_VERSION..."
  KAFKA_STARTED=$SECONDS
  # setsid + nohup: the broker outlives this script and the `make` that ran it,
  # and a Ctrl-C in the terminal does not reach it. The inner shell writes its
  # own pid and then execs java, so the pid file holds the JVM's pid.
  # A small heap: this is a test broker on a 2-core, shared machine.
  # shellcheck disable=SC2016 # $$ and $0 are for the inner shell
  setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$KAFKA_PID" \
    "$JAVA" -Xmx512m -Xms256m "${KAFKA_JVM[@]}" -Dlog4j.configuration="file:$KAFKA_DIR/log4j.properties" \
    kafka.Kafka "$KAFKA_DIR/server.properties" </dev/null >>"$KAFKA_OUT" 2>&1 9>&- &
  # Wait for the pid file so that kafka_wait can tell "died" from "not yet".
  local i
  for ((i = 0; i < 50; i++)); do [[ -s $KAFKA_PID ]] && break; sleep 0.1; done
}

kafka_wait() {
  [[ -n ${KAFKA_STARTED:-} ]] || return 0
  until kafka_answers; do
    if ! pid_alive "$KAFKA_PID" "$KAFKA_DIR/server.properties"; then
      show_tail "$KAFKA_OUT"
      show_tail "$KAFKA_LOG"
      die "kafka: the broker exited during startup"
    fi
    if ((SECONDS - KAFKA_STARTED > KAFKA_TIMEOUT)); then
      show_tail "$KAFKA_LOG"
      die "kafka: not answering on $KAFKA_BROKERS after ${KAFKA_TIMEOUT}s (pid $(<"$KAFKA_PID") still running)"
    fi
    sleep 0.2
  done
  log "kafka: ready in $((SECONDS - KAFKA_STARTED))s"
}

kafka_down() {
  if pid_alive "$KAFKA_PID" "$KAFKA_DIR/server.properties"; then
    local pid
    pid=$(<"$KAFKA_PID")
    log "kafka: stopping (pid $pid)..."
    # SIGTERM is a controlled shutdown: logs are flushed and closed, so the
    # next start skips log recovery.
    kill "$pid"
    if ! wait_exit "$pid" 60; then
      log "kafka: still running after 60s, killing"
      kill -9 "$pid" 2>/dev/null || true
      wait_exit "$pid" 10 || die "kafka: pid $pid survived SIGKILL"
    fi
    rm -f "$KAFKA_PID"
    log "kafka: stopped"
  elif kafka_answers; then
    log "kafka: something answers on $KAFKA_BROKERS but was not started from $DIR; left alone"
  else
    log "kafka: not running"
  fi
}

kafka_kill() {
  kill_pidfile kafka "$KAFKA_PID" "$KAFKA_DIR/server.properties"
  rm -f "$KAFKA_PID"
}

kafka_status() {
  if kafka_answers; then
    if pid_alive "$KAFKA_PID" "$KAFKA_DIR/server.properties"; then
      printf 'kafka     up    %s  kafka %s (KRaft), pid %s\n' "$KAFKA_BROKERS" "$KAFKA_VERSION" "$(<"$KAFKA_PID")"
    else
      printf 'kafka     up    %s  not started from %s\n' "$KAFKA_BROKERS" "$DIR"
    fi
  elif pid_alive "$KAFKA_PID" "$KAFKA_DIR/server.properties"; then
    printf 'kafka     starting (pid %s, not answering yet)\n' "$(<"$KAFKA_PID")"
  else
    printf 'kafka     down\n'
  fi
}

# ------------------------------------------------------ replicated topologies --
#
# What production runs, on loopback: a Redis Cluster, a Redis Sentinel group and a Kafka of
# three brokers. None starts with `up`: a test (or a person) starts one with `start NAME`, and
# it then stays up for the next test, like the other services. A node a fault test killed is
# started again by the next `start`, which is idempotent.

CLUSTER_DIR="$DIR/redis-cluster"
SENTINEL_DIR="$DIR/redis-sentinel"
KAFKA3_DIR="$DIR/kafka3"
CLUSTER_URL="redis+cluster://$HOST:$CLUSTER_PORT,$HOST:$((CLUSTER_PORT + 1)),$HOST:$((CLUSTER_PORT + 2))"
SENTINEL_MASTER=seckill
SENTINEL_URL="redis+sentinel://$HOST:$((SENTINEL_PORT + 2)),$HOST:$((SENTINEL_PORT + 3)),$HOST:$((SENTINEL_PORT + 4))/$SENTINEL_MASTER/0"
KAFKA3_BROKERS="$HOST:$KAFKA3_PORT,$HOST:$((KAFKA3_PORT + 1)),$HOST:$((KAFKA3_PORT + 2))"

redis_port_answers() { [[ $(redis-cli -h $HOST -p "$1" ping 2>/dev/null) == PONG ]]; }

# Start one redis-server (or sentinel) from a config file in dir unless its port answers.
redis_node_up() { # dir port extra-config
  local dir=$1 port=$2
  redis_port_answers "$port" && return 0
  mkdir -p "$dir"
  cat >"$dir/redis.conf" <<CONF
# Generated by deploy/local/services.sh.
bind $HOST
port $port
daemonize yes
pidfile "$dir/redis.pid"
logfile "$dir/redis.log"
dir "$dir"
appendonly yes
appendfsync everysec
save ""
$3
CONF
  redis-server "$dir/redis.conf" 9>&- || { show_tail "$dir/redis.log"; die "redis-server on :$port failed to start"; }
}

wait_until() { # what seconds command...
  local what=$1 limit=$2 start=$SECONDS
  shift 2
  until "$@"; do
    ((SECONDS - start <= limit)) || die "$what: not ready after ${limit}s"
    sleep 0.2
  done
}

cluster_ok() { # every node says the cluster is ok and knows 6 nodes
  local i info
  for ((i = 0; i < 6; i++)); do
    info=$(redis-cli -h $HOST -p $((CLUSTER_PORT + i)) cluster info 2>/dev/null | tr -d '\r') || return 1
    [[ $info == *cluster_state:ok* && $info == *cluster_known_nodes:6* ]] || return 1
  done
}

cluster_up() {
  local i start=$SECONDS
  log "redis-cluster: starting 6 nodes on :$CLUSTER_PORT-$((CLUSTER_PORT + 5))..."
  for ((i = 0; i < 6; i++)); do
    # A short node timeout: a primary killed mid-sale is replaced by its replica in about a
    # second. Its bus port is the port + 10000.
    redis_node_up "$CLUSTER_DIR/$i" $((CLUSTER_PORT + i)) "cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 1000
cluster-replica-validity-factor 0
cluster-require-full-coverage no"
  done
  for ((i = 0; i < 6; i++)); do wait_until "redis-cluster node $i" "$REDIS_TIMEOUT" redis_port_answers $((CLUSTER_PORT + i)); done
  if [[ $(redis-cli -h $HOST -p "$CLUSTER_PORT" cluster info | tr -d '\r' | sed -n 's/^cluster_slots_assigned://p') != 16384 ]]; then
    local -a nodes=()
    for ((i = 0; i < 6; i++)); do nodes+=("$HOST:$((CLUSTER_PORT + i))"); done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$CLUSTER_DIR/create.log" 2>&1 ||
      { show_tail "$CLUSTER_DIR/create.log"; die "redis-cluster: redis-cli --cluster create failed"; }
  fi
  wait_until "redis-cluster" 60 cluster_ok
  log "redis-cluster: ready in $((SECONDS - start))s ($CLUSTER_URL)"
}

sentinel_ok() { # the sentinels agree on a primary that answers, and see its replica
  local addr
  addr=$(redis-cli -h $HOST -p $((SENTINEL_PORT + 2)) sentinel get-master-addr-by-name $SENTINEL_MASTER 2>/dev/null | tr '\n' ' ') || return 1
  [[ -n $addr ]] && [[ $(redis-cli -h $HOST -p $((SENTINEL_PORT + 2)) sentinel master $SENTINEL_MASTER 2>/dev/null | tr '\n' ' ') == *num-slaves\ 1\ * ]]
}

sentinel_up() {
  local i start=$SECONDS primary=$SENTINEL_PORT
  log "redis-sentinel: starting a primary, a replica and 3 sentinels on :$SENTINEL_PORT-$((SENTINEL_PORT + 4))..."
  # A node restarted after a failover comes back as a replica of whoever is primary now: what
  # the sentinels say, or, when they are down too, what they last wrote in their config.
  if redis_port_answers $((SENTINEL_PORT + 2)); then
    primary=$(redis-cli -h $HOST -p $((SENTINEL_PORT + 2)) sentinel get-master-addr-by-name $SENTINEL_MASTER | sed -n 2p)
  elif [[ -s $SENTINEL_DIR/s0/sentinel.conf ]]; then
    primary=$(sed -n "s/^sentinel monitor $SENTINEL_MASTER [^ ]* \([0-9]*\) .*/\1/p" "$SENTINEL_DIR/s0/sentinel.conf")
  fi
  [[ $primary =~ ^[0-9]+$ ]] || primary=$SENTINEL_PORT
  for i in 0 1; do
    local port=$((SENTINEL_PORT + i)) extra=""
    ((port == primary)) || extra="replicaof $HOST $primary"
    redis_node_up "$SENTINEL_DIR/r$i" "$port" "$extra"
  done
  for i in 0 1 2; do
    local port=$((SENTINEL_PORT + 2 + i)) dir="$SENTINEL_DIR/s$i"
    redis_port_answers "$port" && continue
    mkdir -p "$dir"
    # Sentinel rewrites its config file with what it learns: written once only.
    [[ -s $dir/sentinel.conf ]] || cat >"$dir/sentinel.conf" <<CONF
bind $HOST
port $port
daemonize yes
pidfile "$dir/sentinel.pid"
logfile "$dir/sentinel.log"
dir "$dir"
sentinel monitor $SENTINEL_MASTER $HOST $SENTINEL_PORT 2
sentinel down-after-milliseconds $SENTINEL_MASTER 1000
sentinel failover-timeout $SENTINEL_MASTER 5000
sentinel parallel-syncs $SENTINEL_MASTER 1
CONF
    redis-server "$dir/sentinel.conf" --sentinel 9>&- || { show_tail "$dir/sentinel.log"; die "redis-sentinel: sentinel on :$port failed to start"; }
  done
  wait_until "redis-sentinel" 60 sentinel_ok
  log "redis-sentinel: ready in $((SECONDS - start))s ($SENTINEL_URL)"
}

# Stop every redis-server whose pid file is under dir.
redis_dir_down() { # name dir
  local f pid n=0
  while IFS= read -r f; do
    pid_alive "$f" redis-server || continue
    pid=$(<"$f")
    kill "$pid" 2>/dev/null || true
    wait_exit "$pid" 30 || kill -9 "$pid" 2>/dev/null || true
    n=$((n + 1))
  done < <(find "$2" -name '*.pid' 2>/dev/null)
  if ((n)); then log "$1: stopped $n processes"; else log "$1: not running"; fi
}

kafka3_answers() {
  local i md
  for ((i = 0; i < 3; i++)); do port_open $((KAFKA3_PORT + i)) || return 1; done
  md=$(kcat -b "$KAFKA3_BROKERS" -L -m 2 2>/dev/null) || return 1
  [[ $md == *"3 brokers"* ]]
}

kafka3_up() {
  local i id start=$SECONDS voters="" dir
  for ((i = 0; i < 3; i++)); do voters+="${voters:+,}$((i + 1))@$HOST:$((KAFKA3_PORT + 3 + i))"; done
  kafka_jars
  mkdir -p "$KAFKA3_DIR"
  [[ -s $KAFKA3_DIR/cluster.id ]] || head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=' >"$KAFKA3_DIR/cluster.id"
  id=$(<"$KAFKA3_DIR/cluster.id")
  log "kafka3: starting 3 brokers on :$KAFKA3_PORT-$((KAFKA3_PORT + 2))..."
  for ((i = 0; i < 3; i++)); do
    dir="$KAFKA3_DIR/$i"
    port_open $((KAFKA3_PORT + i)) && continue
    pid_alive "$dir/kafka.pid" "$dir/server.properties" && continue
    mkdir -p "$dir/data"
    kafka_log_configs "$dir"
    {
      echo "# Generated by deploy/local/services.sh. Each node is a broker and a KRaft voter."
      kafka_node_props $((i + 1)) "$voters" $((KAFKA3_PORT + i)) $((KAFKA3_PORT + 3 + i)) "$dir/data"
      cat <<CONF
# What production runs: three replicas, two in sync for an acknowledged write, no election of
# a replica that lacks acknowledged records.
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
# A broker killed -9 loses its partitions' leadership once the controller stops hearing from
# it: 9 s by default, during which purchases of its partitions fail their produce.
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500
CONF
    } >"$dir/server.properties"
    if [[ ! -f $dir/data/meta.properties ]]; then
      "$JAVA" -Xmx256m "${KAFKA_JVM[@]}" -Dlog4j.configuration="file:$dir/tools-log4j.properties" \
        kafka.tools.StorageTool format --ignore-formatted --cluster-id="$id" -c "$dir/server.properties" >"$dir/format.log" 2>&1 ||
        { show_tail "$dir/format.log"; die "kafka3: StorageTool format of node $i failed"; }
    fi
    # shellcheck disable=SC2016 # $$ and $0 are for the inner shell
    setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$dir/kafka.pid" \
      "$JAVA" -Xmx384m -Xms128m "${KAFKA_JVM[@]}" -Dlog4j.configuration="file:$dir/log4j.properties" \
      kafka.Kafka "$dir/server.properties" </dev/null >>"$dir/stdout.log" 2>&1 9>&- &
  done
  wait_until "kafka3" "$KAFKA_TIMEOUT" kafka3_answers
  log "kafka3: ready in $((SECONDS - start))s ($KAFKA3_BROKERS)"
}

kafka3_down() {
  local i pid
  local -a pids=()
  for ((i = 0; i < 3; i++)); do
    pid_alive "$KAFKA3_DIR/$i/kafka.pid" "$KAFKA3_DIR/$i/server.properties" && pids+=("$(<"$KAFKA3_DIR/$i/kafka.pid")")
  done
  if ((${#pids[@]} == 0)); then
    log "kafka3: not running"
    return
  fi
  # All at once: stopped one by one, the last two wait out their controlled shutdown on a
  # controller quorum that is gone.
  kill "${pids[@]}" 2>/dev/null || true
  for pid in "${pids[@]}"; do
    wait_exit "$pid" 20 || kill -9 "$pid" 2>/dev/null || true
  done
  log "kafka3: stopped ${#pids[@]} brokers"
}

topology_status() {
  local i n
  n=0; for ((i = 0; i < 6; i++)); do redis_port_answers $((CLUSTER_PORT + i)) && n=$((n + 1)); done
  printf 'redis-cluster   %d of 6 nodes up  %s\n' $n "$CLUSTER_URL"
  n=0; for ((i = 0; i < 5; i++)); do redis_port_answers $((SENTINEL_PORT + i)) && n=$((n + 1)); done
  printf 'redis-sentinel  %d of 5 processes up  %s\n' $n "$SENTINEL_URL"
  n=0; for ((i = 0; i < 3; i++)); do port_open $((KAFKA3_PORT + i)) && n=$((n + 1)); done
  printf 'kafka3          %d of 3 brokers up  %s\n' $n "$KAFKA3_BROKERS"
}

# ---------------------------------------------------------------- commands --

# Two commands at once on one state dir (two terminals, two `make test`s)
# would race to start the same services: take turns. The lock is released
# when we exit; the daemons are started with `9>&-` so that they do not
# inherit (and keep) it.
take_lock() {
  mkdir -p "$DIR"
  exec 9>"$DIR/.lock"
  flock 9
}

# A test that runs a private set of servers names its own process in
# SECKILL_SERVICES_OWNER_PID. A watchdog then cleans the state dir up once that
# process is gone, even if it crashed or `go test -timeout` killed it before
# its own cleanup ran: private servers must never outlive their test (a
# leaked Kafka holds half a gigabyte and two ports). The watchdog leaves on
# its own once the test has cleaned up (the state dir is gone).
watch_owner() {
  local owner=${SECKILL_SERVICES_OWNER_PID:-}
  [[ -n $owner ]] || return 0
  [[ $owner =~ ^[0-9]+$ ]] || die "SECKILL_SERVICES_OWNER_PID=$owner is not a pid"
  pid_alive "$DIR/watchdog.pid" _watch && return 0
  setsid nohup "$SCRIPT" _watch "$owner" </dev/null >>"$DIR/watchdog.log" 2>&1 9>&- &
  printf '%s\n' "$!" >"$DIR/watchdog.pid"
}

cmd_watch() { # owner pid
  printf '%s\n' "$$" >"$DIR/watchdog.pid"
  while [[ -d $DIR ]]; do
    if pid_gone "$1"; then
      log "watchdog: pid $1 is gone; cleaning $DIR up"
      cmd_clean
      return
    fi
    sleep 1
  done
}

cmd_up() {
  local start=$SECONDS
  take_lock
  ensure_packages
  watch_owner
  kafka_start   # slowest: let the JVM boot while the others start
  redis_up
  pg_up
  kafka_wait
  log "services: up in $((SECONDS - start))s (state in $DIR)"
}

cmd_down() {
  kafka_down
  redis_down
  pg_down
  [[ -d $CLUSTER_DIR ]] && redis_dir_down redis-cluster "$CLUSTER_DIR"
  [[ -d $SENTINEL_DIR ]] && redis_dir_down redis-sentinel "$SENTINEL_DIR"
  [[ -d $KAFKA3_DIR ]] && kafka3_down
  return 0
}

# start, stop, kill or clean the named services, one by one, so a fault test
# can take one dependency away mid-sale and bring it back.
cmd_service() { # verb service...
  local verb=$1 svc
  shift
  local names="redis, postgres, kafka, redis-cluster, redis-sentinel, kafka3"
  (($#)) || die "$verb: name the service(s): $names"
  for svc; do
    case $verb:$svc in
      *:redis | *:postgres | *:kafka | start:redis-cluster | start:redis-sentinel | start:kafka3) ;;
      stop:redis-cluster | stop:redis-sentinel | stop:kafka3 | clean:redis-cluster | clean:redis-sentinel | clean:kafka3) ;;
      kill:redis-cluster | kill:redis-sentinel | kill:kafka3)
        die "kill: a fault test kills one node of $svc by its pid (redis INFO process_id, $svc's pid files)" ;;
      *) die "$verb: unknown service \`$svc\` ($names)" ;;
    esac
  done
  take_lock
  if [[ $verb == start ]]; then
    ensure_packages
    watch_owner
  fi
  for svc; do
    case $verb:$svc in
      start:redis) redis_up ;;
      start:postgres) pg_up ;;
      start:kafka) kafka_start; kafka_wait ;;
      start:redis-cluster) cluster_up ;;
      start:redis-sentinel) sentinel_up ;;
      start:kafka3) kafka3_up ;;
      stop:redis-cluster) redis_dir_down redis-cluster "$CLUSTER_DIR" ;;
      stop:redis-sentinel) redis_dir_down redis-sentinel "$SENTINEL_DIR" ;;
      stop:kafka3) kafka3_down ;;
      clean:redis-cluster) redis_dir_down redis-cluster "$CLUSTER_DIR"; rm -rf "$CLUSTER_DIR" ;;
      clean:redis-sentinel) redis_dir_down redis-sentinel "$SENTINEL_DIR"; rm -rf "$SENTINEL_DIR" ;;
      clean:kafka3) kafka3_down; rm -rf "$KAFKA3_DIR" ;;
      stop:redis) redis_down ;;
      stop:postgres) pg_down ;;
      stop:kafka) kafka_down ;;
      kill:redis) redis_kill ;;
      kill:postgres) pg_kill ;;
      kill:kafka) kafka_kill ;;
      # Its state goes, so the next start is a server that lost everything
      # (Redis without its AOF: the guard's rebuild path).
      clean:redis) redis_down; log "clean: removing $REDIS_DIR"; rm -rf "$REDIS_DIR" ;;
      clean:postgres) pg_down; local root; root=$(pg_root); log "clean: removing $root"; rm -rf "$root" ;;
      clean:kafka) kafka_down; log "clean: removing $KAFKA_DIR"; rm -rf "$KAFKA_DIR" ;;
    esac
  done
}

cmd_env() {
  printf 'export SECKILL_TEST_REDIS_URL=%s\n' "$REDIS_URL"
  # Quoted: the URL contains '?', which an unquoted `eval $(...)` would glob.
  printf "export SECKILL_TEST_POSTGRES_URL='%s'\n" "$PG_URL"
  printf 'export SECKILL_TEST_KAFKA_BROKERS=%s\n' "$KAFKA_BROKERS"
  # The replicated topologies (started by `start redis-cluster redis-sentinel kafka3`).
  printf 'export SECKILL_TEST_REDIS_CLUSTER_URL=%s\n' "$CLUSTER_URL"
  printf 'export SECKILL_TEST_REDIS_SENTINEL_URL=%s\n' "$SENTINEL_URL"
  printf 'export SECKILL_TEST_KAFKA3_BROKERS=%s\n' "$KAFKA3_BROKERS"
}

cmd_logs() {
  show_tail "$REDIS_LOG" 2>&1
  show_tail "$(pg_root)/postgres.log" 2>&1
  show_tail "$KAFKA_OUT" 2>&1
  show_tail "$KAFKA_LOG" 2>&1
}

cmd_clean() {
  take_lock
  cmd_down
  local root
  root=$(pg_root)
  log "clean: removing $DIR"
  if [[ $root != "$DIR/postgres" ]]; then
    log "clean: removing $root"
    rm -rf "$root"
  fi
  rm -rf "$DIR"
}

cmd_topics() {
  [[ -f $KAFKA_HOME/.complete ]] || die "kafka jars not resolved yet; run \`$0 up\` first"
  kafka_write_config
  kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_BROKERS" "$@"
}

usage() {
  cat <<EOF
usage: deploy/local/services.sh COMMAND [SERVICE...]

Private Redis, PostgreSQL and Kafka for seckill's tests, bound to $HOST.
State: \$SECKILL_SERVICES_DIR (now $DIR). Ports: \$SECKILL_REDIS_PORT,
\$SECKILL_POSTGRES_PORT, \$SECKILL_KAFKA_PORT, \$SECKILL_KAFKA_CONTROLLER_PORT.
With \$SECKILL_SERVICES_OWNER_PID set, up/start also leave a watchdog that
runs \`clean\` once that process is gone (a test's private servers).

  up       install what is missing (apt, as root), start what is not
           running, wait until all three answer. Idempotent.
  down     stop the three services (data is kept)
  status   one line per service
  env      print the exports the tests read:  eval "\$($0 env)"
  logs     print the end of each service's log
  clean    down, then delete all state (not the cached Kafka jars)
  start SERVICE...  start one service (redis, postgres, kafka, redis-cluster,
                    redis-sentinel, kafka3), wait until it answers
  stop SERVICE...   stop one service cleanly (data is kept)
  kill SERVICE...   SIGKILL one service, as a crash would (fault tests; redis,
                    postgres, kafka)
  clean SERVICE...  stop one service and delete its state: it starts empty
  topics   run Kafka's TopicCommand against the broker, e.g.
             $0 topics --list
             $0 topics --create --topic t --partitions 3
  help     this text

  redis     $HOST:$REDIS_PORT  redis-server, appendonly yes, everysec
  postgres  $HOST:$PG_PORT  role/password/db seckill, fsync off
  kafka     $HOST:$KAFKA_PORT  Kafka $KAFKA_VERSION KRaft (controller :$KAFKA_CONTROLLER_PORT),
            jars from Maven Central cached in $KAFKA_HOME

Started on demand only (\`start NAME\`), the topologies production runs:
  redis-cluster   $HOST:$CLUSTER_PORT-$((CLUSTER_PORT + 5))  3 primaries, 3 replicas
  redis-sentinel  $HOST:$SENTINEL_PORT (primary), $((SENTINEL_PORT + 1)) (replica),
                  $((SENTINEL_PORT + 2))-$((SENTINEL_PORT + 4)) (sentinels, master name $SENTINEL_MASTER)
  kafka3          $HOST:$KAFKA3_PORT-$((KAFKA3_PORT + 2))  3 brokers (KRaft voters
                  :$((KAFKA3_PORT + 3))-$((KAFKA3_PORT + 5))), replication 3, min.insync.replicas 2
EOF
}

case ${1:-help} in
  up) cmd_up ;;
  down) cmd_down ;;
  # Without a service, stop and clean act on all three, as they always did.
  stop) if (($# > 1)); then cmd_service "$@"; else cmd_down; fi ;;
  clean) if (($# > 1)); then cmd_service "$@"; else cmd_clean; fi ;;
  start | kill) cmd_service "$@" ;;
  _watch) cmd_watch "$2" ;; # the watchdog itself; see watch_owner
  status) redis_status; pg_status; kafka_status; topology_status ;;
  env) cmd_env ;;
  logs) cmd_logs ;;
  topics) shift; cmd_topics "$@" ;;
  help | -h | --help) usage ;;
  *) usage >&2; exit 2 ;;
esac
