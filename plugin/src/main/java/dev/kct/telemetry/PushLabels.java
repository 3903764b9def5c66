package dev.kct.telemetry;

import java.lang.reflect.Field;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;

/**
 * The KIP-714 "broker-added labels" of one push, and their HTTP-header encoding (the wire format the
 * receiver reads). Header names are lower case and start with {@code kct-}; values are UTF-8,
 * percent-encoded (RFC 3986 style) for every byte outside visible ASCII, for space and for '%', so a
 * client id cannot inject CR/LF or break the header; a receiver decodes them with a plain URL-unquote.
 */
public final class PushLabels {

    public static final String H_CLIENT_INSTANCE_ID = "kct-client-instance-id";
    public static final String H_CLIENT_ID = "kct-client-id";
    public static final String H_CLIENT_SOFTWARE_NAME = "kct-client-software-name";
    public static final String H_CLIENT_SOFTWARE_VERSION = "kct-client-software-version";
    public static final String H_CLIENT_SOURCE_ADDRESS = "kct-client-source-address";
    public static final String H_CLIENT_SOURCE_PORT = "kct-client-source-port";
    public static final String H_PRINCIPAL = "kct-principal";
    public static final String H_BROKER_ID = "kct-broker-id";
    public static final String H_LISTENER = "kct-listener";
    public static final String H_TERMINATING = "kct-terminating";
    public static final String H_PUSH_INTERVAL_MS = "kct-push-interval-ms";
    public static final String H_PAYLOAD_CONTENT_TYPE = "kct-payload-content-type";

    private PushLabels() {
    }

    /**
     * Labels for one push, in a stable order; absent values (e.g. the push interval on the pre-4.2
     * interface, or a port the broker does not expose) are left out rather than sent empty.
     *
     * @param pushIntervalMs the subscription's push interval, or a negative number when unknown
     */
    public static Map<String, String> of(AuthorizableRequestContext context, Uuid clientInstanceId,
                                         boolean terminating, String payloadContentType,
                                         String brokerId, int pushIntervalMs) {
        Map<String, String> labels = new LinkedHashMap<>();
        put(labels, H_CLIENT_INSTANCE_ID, clientInstanceId == null ? null : clientInstanceId.toString());
        put(labels, H_CLIENT_ID, context.clientId());
        ClientSoftware software = ClientSoftware.of(context);
        put(labels, H_CLIENT_SOFTWARE_NAME, software.name);
        put(labels, H_CLIENT_SOFTWARE_VERSION, software.version);
        InetAddress address = context.clientAddress();
        put(labels, H_CLIENT_SOURCE_ADDRESS, address == null ? null : address.getHostAddress());
        Integer port = ClientSoftware.port(context);
        put(labels, H_CLIENT_SOURCE_PORT, port == null ? null : port.toString());
        KafkaPrincipal principal = context.principal();
        put(labels, H_PRINCIPAL, principal == null ? null : principal.toString());
        put(labels, H_BROKER_ID, brokerId);
        put(labels, H_LISTENER, context.listenerName());
        labels.put(H_TERMINATING, Boolean.toString(terminating));
        if (pushIntervalMs >= 0) {
            labels.put(H_PUSH_INTERVAL_MS, Integer.toString(pushIntervalMs));
        }
        put(labels, H_PAYLOAD_CONTENT_TYPE, payloadContentType);
        return labels;
    }

    private static void put(Map<String, String> labels, String name, String value) {
        if (value != null && !value.isEmpty()) {
            labels.put(name, encode(value));
        }
    }

    /** Percent-encode the UTF-8 bytes of {@code value} that are not visible ASCII, plus space and '%'. */
    public static String encode(String value) {
        boolean clean = true;
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            if (c <= 0x20 || c >= 0x7f || c == '%') {
                clean = false;
                break;
            }
        }
        if (clean) {
            return value;
        }
        StringBuilder out = new StringBuilder(value.length() + 16);
        for (byte b : value.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if (c <= 0x20 || c >= 0x7f || c == '%') {
                out.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                    .append(Character.toUpperCase(Character.forDigit(c & 0xf, 16)));
            } else {
                out.append((char) c);
            }
        }
        return out.toString();
    }

    /**
     * Software name/version and source port are not on {@link AuthorizableRequestContext}; the broker
     * passes its concrete {@code org.apache.kafka.common.requests.RequestContext}, whose public fields
     * {@code clientInformation} and (3.7+) {@code clientPort} hold them. Read by reflection, looked up
     * once, so another context implementation (or a Kafka version without a field) yields "absent"
     * instead of an error on the request thread.
     */
    static final class ClientSoftware {
        private static final String REQUEST_CONTEXT = "org.apache.kafka.common.requests.RequestContext";
        private static final Field CLIENT_INFORMATION = field("clientInformation");
        private static final Field CLIENT_PORT = field("clientPort");

        final String name;
        final String version;

        private ClientSoftware(String name, String version) {
            this.name = name;
            this.version = version;
        }

        private static Field field(String name) {
            try {
                return Class.forName(REQUEST_CONTEXT).getField(name);
            } catch (ReflectiveOperationException | LinkageError | SecurityException e) {
                return null;
            }
        }

        static ClientSoftware of(AuthorizableRequestContext context) {
            Object info = read(CLIENT_INFORMATION, context);
            if (info instanceof org.apache.kafka.common.network.ClientInformation ci) {
                return new ClientSoftware(ci.softwareName(), ci.softwareVersion());
            }
            return new ClientSoftware(null, null);
        }

        static Integer port(AuthorizableRequestContext context) {
            Object port = read(CLIENT_PORT, context);
            if (port instanceof Optional<?> optional && optional.isPresent()
                && optional.get() instanceof Integer value) {
                return value;
            }
            return null;
        }

        private static Object read(Field field, Object context) {
            if (field == null || !field.getDeclaringClass().isInstance(context)) {
                return null;
            }
            try {
                return field.get(context);
            } catch (IllegalAccessException | RuntimeException e) {
                return null;
            }
        }
    }
}
