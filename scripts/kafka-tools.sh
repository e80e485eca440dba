#!/usr/bin/env bash
# Apache Kafka's own Java client and CLI tools, for tests against kraft-py.
#
#   scripts/kafka-tools.sh install            fetch the jars once (Maven Central)
#   scripts/kafka-tools.sh TOOL [ARGS...]     run a tool, installing first if needed
#
# TOOL is a short name (topics, console-consumer, console-producer, consumer-groups,
# consumer-perf-test, producer-perf-test, e2e-latency, reassign-partitions) or a fully
# qualified main class.
# The jars land in ./.cache/kafka-tools/lib (gitignored), with Maven's local repository
# beside them, so after one install the tools run offline: the launcher needs only java.
set -euo pipefail
# shellcheck source=scripts/maven-classpath.sh
source "$(dirname "$0")/maven-classpath.sh"

KAFKA_VERSION="${KAFKA_TOOLS_VERSION:-4.1.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${KAFKA_TOOLS_CACHE:-$ROOT/.cache/kafka-tools}"
LIB="$CACHE/lib-$KAFKA_VERSION"
STAMP="$LIB/.installed"

install() {
    if [ -f "$STAMP" ]; then
        return 0
    fi
    maven_classpath "$CACHE" "$LIB.tmp" "kafka-tools-$KAFKA_VERSION" \
        "org.apache.kafka:kafka-tools:$KAFKA_VERSION" \
        "org.apache.kafka:kafka-clients:$KAFKA_VERSION" \
        org.slf4j:slf4j-nop:1.7.36
    rm -rf "$LIB"
    mv "$LIB.tmp" "$LIB"
    touch "$STAMP"
}

main_class() {
    case "$1" in
        topics) echo org.apache.kafka.tools.TopicCommand ;;
        console-consumer) echo org.apache.kafka.tools.consumer.ConsoleConsumer ;;
        console-producer) echo org.apache.kafka.tools.ConsoleProducer ;;
        consumer-groups) echo org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
        consumer-perf-test) echo org.apache.kafka.tools.ConsumerPerformance ;;
        producer-perf-test) echo org.apache.kafka.tools.ProducerPerformance ;;
        e2e-latency) echo org.apache.kafka.tools.EndToEndLatency ;;
        reassign-partitions) echo org.apache.kafka.tools.reassign.ReassignPartitionsCommand ;;
        log-dirs) echo org.apache.kafka.tools.LogDirsCommand ;;
        delete-records) echo org.apache.kafka.tools.DeleteRecordsCommand ;;
        *.*) echo "$1" ;;
        *) echo "kafka-tools: unknown tool '$1'" >&2; exit 2 ;;
    esac
}

if [ $# -eq 0 ]; then
    sed -n '2,10p' "$0" >&2
    exit 2
fi
if [ "$1" = install ]; then
    install
    exit 0
fi
class="$(main_class "$1")"
shift
install
exec java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$LIB/*" "$class" "$@"
