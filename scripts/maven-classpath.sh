# Sourced by kafka-tools.sh and kafka-dist.sh: fetch Maven artifacts with their runtime
# dependencies from Maven Central into one flat dir, a classpath for `java -cp DIR/*`.
#
#   maven_classpath CACHE OUT NAME GROUP:ARTIFACT:VERSION...
#
# The pom is CACHE/pom-NAME.xml, Maven's local repository CACHE/m2 (so a later fetch of the
# same artifacts is offline); OUT is made afresh. Maven's chatter goes to stderr.

maven_classpath() {
    local cache="$1" out="$2" name="$3"
    shift 3
    command -v mvn >/dev/null || { echo "$name: mvn not found (need Maven and Java 17+)" >&2; exit 2; }
    mkdir -p "$cache"
    local pom="$cache/pom-$name.xml" dependencies="" group artifact version
    for coordinate in "$@"; do
        IFS=: read -r group artifact version <<<"$coordinate"
        dependencies+="    <dependency><groupId>$group</groupId><artifactId>$artifact</artifactId><version>$version</version></dependency>
"
    done
    cat >"$pom" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kraft-py</groupId>
  <artifactId>$name-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
$dependencies  </dependencies>
</project>
POM
    rm -rf "$out"
    mvn -q -B -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$cache/m2" -DincludeScope=runtime \
        dependency:copy-dependencies -DoutputDirectory="$out" >&2
}
