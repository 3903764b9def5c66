# syntax=docker/dockerfile:1
#
# Targets (the last stage, `runtime`, is the default):
#   docker build -t kct .                            `kct operator` and `kct receiver` (the chart's image)
#   docker build --target spark -t kct-spark .       the aggregation job, on the official Apache Spark image,
#                                                    for the SparkApplication a TelemetryReceiver renders
#   docker build --target plugin -o out .            out/kct-telemetry-plugin.jar, for broker images
#                                                    (also in the runtime image at /opt/kct/share/)
#
# Bases are pinned by exact tag. Pin digests too when you publish (`FROM image:tag@sha256:...`).
# Without Docker, `make images` builds the `runtime` and `spark` targets from this file with buildah, on
# local Debian bookworm bases passed as PYTHON_IMAGE, MAVEN_IMAGE and SPARK_IMAGE (dev/images/); the tests
# and the local node run those images.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
# The build stage compiles the receiver's C extension: the same Python with a C compiler and its headers.
ARG PYTHON_BUILD_IMAGE=python:3.11.14-bookworm
ARG MAVEN_IMAGE=maven:3.9.11-eclipse-temurin-17
# The Spark release of the job image: the official image and the connector jars (dev/spark-deps/pom.xml)
# both follow it. Keep it the release the aggregation job is tested with (pyspark in pyproject.toml).
ARG SPARK_VERSION=4.2.0
# The official Spark image of that release: its entrypoint is what the spark-operator runs as driver and
# executors. (A JDK + Spark base of the same release with the same layout can stand in: /opt/spark, user 185.)
ARG SPARK_IMAGE=apache/spark:4.2.0-scala2.13-java21-python3-ubuntu

# ---------------------------------------------------------------------------------------- broker plugin
FROM ${MAVEN_IMAGE} AS plugin-build
WORKDIR /src
COPY plugin/ ./
# The cache mount keeps Maven's downloads between builds and out of every layer.
RUN --mount=type=cache,target=/root/.m2 \
    mvn -B -q -DskipTests package && cp target/kct-telemetry-plugin-*.jar /kct-telemetry-plugin.jar

FROM scratch AS plugin
COPY --from=plugin-build /kct-telemetry-plugin.jar /

# ------------------------------------------------------- Spark's Kafka source (spark-sql-kafka + deps)
FROM ${MAVEN_IMAGE} AS spark-jars
ARG SPARK_VERSION
WORKDIR /src
COPY dev/spark-deps/ ./
RUN mvn -B -q dependency:copy-dependencies -Dspark.version=${SPARK_VERSION} -DoutputDirectory=/jars

# ------------------------------------------------------------------------ the Spark aggregation job
FROM ${SPARK_IMAGE} AS spark-base

# The aggregation's JVM code (operator/kct/aggregation/jvm: the OTLP decoder, ClientWindows, Rollups, ...),
# compiled against the Spark image's own jars. Only the pom and the main sources: the JUnit tests run in
# `make test`, not in the image build (-Dmaven.test.skip), so a test edit does not change the image.
FROM ${MAVEN_IMAGE} AS otlp-decoder
ARG SPARK_VERSION
WORKDIR /src
COPY operator/kct/aggregation/jvm/pom.xml ./
COPY operator/kct/aggregation/jvm/src/main/ src/main/
# ClientWindows builds on Spark's internals (Datasets, RDDs of InternalRow): the jars the pom names.
COPY --from=spark-base /opt/spark/jars/spark-sql-api_2.13-${SPARK_VERSION}.jar \
     /opt/spark/jars/spark-sql_2.13-${SPARK_VERSION}.jar /opt/spark/jars/spark-catalyst_2.13-${SPARK_VERSION}.jar \
     /opt/spark/jars/spark-core_2.13-${SPARK_VERSION}.jar /opt/spark/jars/spark-unsafe_2.13-${SPARK_VERSION}.jar \
     /opt/spark/jars/spark-common-utils_2.13-${SPARK_VERSION}.jar \
     /opt/spark/jars/spark-common-utils-java_2.13-${SPARK_VERSION}.jar \
     /opt/spark/jars/scala-library-*.jar /opt/spark/jars/scala-reflect-*.jar /opt/spark/jars/kryo-shaded-*.jar /spark-jars/
SHELL ["/bin/bash", "-eo", "pipefail", "-c"]
RUN --mount=type=cache,target=/root/.m2 \
    scala="$(find /spark-jars -name 'scala-library-*.jar' -printf '%f' | sed 's/^scala-library-//; s/[.]jar$//')" \
    && kryo="$(find /spark-jars -name 'kryo-shaded-*.jar' -printf '%f' | sed 's/^kryo-shaded-//; s/[.]jar$//')" \
    && mvn -B -q package -Dmaven.test.skip=true -Dspark.version=${SPARK_VERSION} -Dscala.library.version="$scala" \
        -Dkryo.version="$kryo" -Dspark.jars.dir=/spark-jars -Dkct.build.dir=/build \
    && cp /build/kct-otlp-decoder.jar /kct-otlp-decoder.jar

# The job's Python: the kct package without the JVM sources next to the aggregation's modules (the stage
# above builds them into the jar). A stage of its own, so the image's layers never hold them; any base with a
# shell does, and the Maven one is already there.
FROM ${MAVEN_IMAGE} AS job-python
COPY operator/kct/ /kct/
RUN rm -rf /kct/aggregation/jvm

# Its Python may be older than the kct package's floor (the official image's is Ubuntu's), so the job gets
# the package's sources and the few libraries it imports on PYTHONPATH instead of a pip install of the
# whole project. The Kafka connector and the decoder go into Spark's own jars (the driver's and executors'
# classpath), so the job needs no spark.jars.
FROM spark-base AS spark
USER 0:0
COPY --from=spark-jars /jars/ /opt/spark/jars/
COPY --from=otlp-decoder /kct-otlp-decoder.jar /opt/spark/jars/
COPY --from=job-python /kct/ /opt/kct/python/kct/
COPY spark/aggregation_job.py /opt/kct/spark/
# Version ranges as in pyproject.toml; the job needs only these of the package's dependencies.
RUN python3 -m pip install --no-cache-dir --target /opt/kct/python "pydantic>=2.9,<3" "protobuf>=5" "opentelemetry-proto>=1.45" \
        "pyarrow>=15" "pandas>=2.2,<3" "pyyaml>=6" "confluent-kafka>=2.16,<3"
ENV PYTHONPATH=/opt/kct/python KCT_OTLP_DECODER_JAR=/opt/spark/jars/kct-otlp-decoder.jar
USER 185:185

# ------------------------------------------------------------------ operator and receiver (default)
FROM ${PYTHON_BUILD_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY operator/ operator/
# pip's cache lives in a cache mount: rebuilds after a source change reuse the wheels, the image holds none.
RUN --mount=type=cache,target=/root/.cache/pip \
    python -m venv /opt/kct && /opt/kct/bin/pip install .

FROM ${PYTHON_IMAGE} AS runtime
# uid and gid 10001, the ids the chart and the rendered receiver pods run as (a system group would get a low gid).
RUN groupadd --system --gid 10001 kct \
    && useradd --system --uid 10001 --gid kct --no-create-home --shell /usr/sbin/nologin kct
COPY --from=build /opt/kct /opt/kct
COPY --from=plugin-build /kct-telemetry-plugin.jar /opt/kct/share/kct-telemetry-plugin.jar
# No bytecode writes: the chart runs this image with a read-only root filesystem (pip precompiled it).
ENV PATH=/opt/kct/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
# 8080: operator liveness (/healthz); 4318: receiver OTLP/HTTP.
EXPOSE 8080 4318
ENTRYPOINT ["kct"]
CMD ["operator"]
