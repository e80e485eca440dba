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

KAFKA_VERSION="${KAFKA_TOOLS_VERSION:-4.1.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${KAFKA_TOOLS_CACHE:-$ROOT/.cache/kafka-tools}"
LIB="$CACHE/lib-$KAFKA_VERSION"
STAMP="$LIB/.installed"

install() {
    if [ -f "$STAMP" ]; then
        return 0
    fi
    command -v mvn >/dev/null || { echo "kafka-tools: mvn not found (need Maven and Java 17+)" >&2; exit 2; }
    mkdir -p "$CACHE"
    local pom="$CACHE/pom-$KAFKA_VERSION.xml"
    cat >"$pom" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kraft-py</groupId>
  <artifactId>kafka-tools-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-nop</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
POM
    rm -rf "$LIB.tmp"
    mvn -q -B -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$CACHE/m2" \
        dependency:copy-dependencies -DoutputDirectory="$LIB.tmp"
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
