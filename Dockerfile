# syntax=docker/dockerfile:1
# One image runs `kct operator` and `kct receiver`; the broker plugin jar is built in its own stage and
# can be copied out (`docker build --target plugin -o out .`) for broker images.

FROM maven:3.9.11-eclipse-temurin-17 AS plugin
WORKDIR /src
COPY plugin/ ./
RUN mvn -B -q -DskipTests package && cp target/*.jar /kct-telemetry-plugin.jar

FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN python -m venv /opt/kct && /opt/kct/bin/pip install --no-cache-dir .

FROM python:3.11.14-slim-bookworm AS runtime
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin kct
COPY --from=build /opt/kct /opt/kct
COPY --from=plugin /kct-telemetry-plugin.jar /opt/kct/share/kct-telemetry-plugin.jar
ENV PATH=/opt/kct/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
ENTRYPOINT ["kct"]
CMD ["--help"]
