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
# Without Docker, `make images` builds the default target from this file with buildah, on local Debian
# bookworm bases passed as PYTHON_IMAGE and MAVEN_IMAGE (dev/images/); the tests run that image.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
# The build stage compiles the receiver's C extension: the same Python with a C compiler and its headers.
ARG PYTHON_BUILD_IMAGE=python:3.11.14-bookworm
ARG MAVEN_IMAGE=maven:3.9.11-eclipse-temurin-17
# The Spark release of the job image: the official image and the connector jars (dev/spark-deps/pom.xml)
# both follow it. Keep it the release the aggregation job is tested with (pyspark in pyproject.toml).
ARG SPARK_VERSION=4.2.0

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
# The official image's entrypoint is what the spark-operator runs as driver and executors. Its Python
# (Ubuntu's python3) is older than the kct package's floor, so the job gets the package's sources and the
# few libraries it imports on PYTHONPATH instead of a pip install of the whole project.
FROM apache/spark:${SPARK_VERSION}-scala2.13-java21-python3-ubuntu AS spark
USER 0:0
COPY --from=spark-jars /jars/ /opt/spark/jars/
COPY operator/kct/ /opt/kct/python/kct/
COPY spark/ /opt/kct/spark/
# Version ranges as in pyproject.toml; the job needs only these of the package's dependencies.
RUN python3 -m pip install --no-cache-dir --target /opt/kct/python "pydantic>=2.9,<3" "protobuf>=5" "opentelemetry-proto>=1.45" \
        "pyarrow>=15" "pandas>=2.2,<3" "pyyaml>=6" "confluent-kafka>=2.16,<3"
ENV PYTHONPATH=/opt/kct/python
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
