#!/usr/bin/env bash
# Builds the Spark job's local file system class (spark_jobs/hadoop/LocalFileSystem.java)
# into a jar, against the Hadoop client of the venv's PySpark: build-hadoop-fs.sh PYTHON JAR
set -euo pipefail

cd "$(dirname "$0")/.."
python=$1
jar=$2
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
api=$(ls "$jars"/hadoop-client-api-*.jar | head -n1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
javac --release 17 -nowarn -d "$work/classes" -cp "$api" spark_jobs/hadoop/LocalFileSystem.java
mkdir -p "$(dirname "$jar")"
jar cf "$jar.part" -C "$work/classes" penumbra
mv "$jar.part" "$jar"
echo "built $jar"
