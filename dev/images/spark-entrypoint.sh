#!/bin/bash
# The entrypoint of the local Spark base (debian_base.py, SPARK_BASE), standing in for the official
# apache/spark image's: Spark on Kubernetes starts driver pods with `driver ARGS...` and executor pods with
# `executor` plus SPARK_* environment variables, and expects the image to turn those into a JVM. Anything
# else runs as given (`kct aggregate --help`, a shell).
set -euo pipefail

: "${SPARK_HOME:=/opt/spark}"
classpath="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}${SPARK_HOME}/jars/*"

# The JVM options Spark passes executors as SPARK_JAVA_OPT_0, _1, ... (in that order).
java_options() {
    local i=0
    while true; do
        local name="SPARK_JAVA_OPT_$i"
        [[ -v $name ]] || break
        printf '%s\0' "${!name}"
        i=$((i + 1))
    done
}

case "${1:-}" in
    driver)
        shift
        # The driver runs spark-submit in client mode inside its own pod, bound to the pod's address.
        exec "$SPARK_HOME/bin/spark-submit" \
            --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
            --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
            --deploy-mode client "$@"
        ;;
    executor)
        shift
        mapfile -d '' options < <(java_options)
        exec "${JAVA_HOME}/bin/java" "${options[@]}" \
            "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
            -cp "$classpath" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
            --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
            --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
            --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
            --podName "${SPARK_EXECUTOR_POD_NAME:-}"
        ;;
    *)
        exec "$@"
        ;;
esac
