#!/usr/bin/env bash
# An Apache Kafka broker (KRaft) assembled from Maven Central, to compare kraft-py with Kafka
# (bench/bench_replication.py --kafka-lib, kraft-jepsen run --kafka-lib).
#
#   scripts/kafka-dist.sh install                 fetch the jars once; prints the lib dir
#   scripts/kafka-dist.sh lib                     the lib dir (installing first if needed)
#   scripts/kafka-dist.sh storage ARGS...         Kafka's StorageTool (random-uuid, format ...)
#   scripts/kafka-dist.sh server CONFIG           a node: java -cp LIB/* kafka.Kafka CONFIG
#   scripts/kafka-dist.sh configs ARGS...         Kafka's kafka-configs (kafka.admin.ConfigCommand)
#
# The lib dir holds org.apache.kafka:kafka_2.13 with its runtime dependencies and a log4j2
# SLF4J binding, as the distribution's libs/ does; log4j2.properties beside it logs a
# server's INFO to stdout, tools-log4j2.properties a tool's warnings to stderr. A node is
# formatted and started by hand (every node, one cluster id):
#   ID=$(scripts/kafka-dist.sh storage random-uuid)
#   scripts/kafka-dist.sh storage format -t "$ID" -c node1.properties
#   scripts/kafka-dist.sh server node1.properties
# The jars land in ./.cache/kafka-dist (gitignored) with Maven's local repository beside
# them, so after one install everything runs offline: the launcher needs only java 17+.
set -euo pipefail
# shellcheck source=scripts/maven-classpath.sh
source "$(dirname "$0")/maven-classpath.sh"

KAFKA_VERSION="${KAFKA_DIST_VERSION:-4.1.0}"
LOG4J_VERSION="2.24.3" # the version kafka-server 4.1.0 depends on
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${KAFKA_DIST_CACHE:-$ROOT/.cache/kafka-dist}"
LIB="$CACHE/lib-$KAFKA_VERSION"
STAMP="$LIB/.installed"
HEAP="${KAFKA_DIST_HEAP:-256m}"

install() {
    if [ -f "$STAMP" ]; then
        return 0
    fi
    maven_classpath "$CACHE" "$LIB.tmp" "kafka-dist-$KAFKA_VERSION" \
        "org.apache.kafka:kafka_2.13:$KAFKA_VERSION" \
        "org.apache.logging.log4j:log4j-slf4j-impl:$LOG4J_VERSION"
    cat >"$LIB.tmp/log4j2.properties" <<'LOG4J'
# INFO to stdout (the caller redirects it to the node's log file).
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
LOG4J
    cat >"$LIB.tmp/tools-log4j2.properties" <<'LOG4J'
# The tools print their answers on stdout: their warnings go to stderr.
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
LOG4J
    rm -rf "$LIB"
    mv "$LIB.tmp" "$LIB"
    touch "$STAMP"
}

java_run() {
    local log4j="$1"
    shift
    exec java -Xms64m -Xmx"$HEAP" -XX:+UseG1GC -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile="$LIB/$log4j" -cp "$LIB/*" "$@"
}

if [ $# -eq 0 ]; then
    sed -n '2,19p' "$0" >&2
    exit 2
fi
command="$1"
shift
case "$command" in
    install) install; echo "$LIB" ;;
    lib) install; echo "$LIB" ;;
    storage) install; java_run tools-log4j2.properties kafka.tools.StorageTool "$@" ;;
    server) install; java_run log4j2.properties kafka.Kafka "$@" ;;
    configs) install; java_run tools-log4j2.properties kafka.admin.ConfigCommand "$@" ;;
    *) echo "kafka-dist: unknown command '$command' (install, lib, storage, server, configs)" >&2; exit 2 ;;
esac
