package dev.kct.telemetry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.net.InetAddress;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.network.ClientInformation;
import org.apache.kafka.common.network.ListenerName;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.requests.RequestContext;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.junit.jupiter.api.Test;

class PushLabelsTest {

    /** Whether this kafka-clients' RequestContext carries the client's port (3.8+; not 3.7). */
    static final boolean HAS_CLIENT_PORT = hasClientPort();

    private static boolean hasClientPort() {
        try {
            RequestContext.class.getField("clientPort");
            return true;
        } catch (NoSuchFieldException e) {
            return false;
        }
    }

    /** A request context as the broker builds it, with the client's port where the release has one. */
    static RequestContext context(String clientId) throws Exception {
        RequestHeader header = new RequestHeader(ApiKeys.PUSH_TELEMETRY, (short) 0, clientId, 7);
        InetAddress address = InetAddress.getByName("127.0.0.5");
        ListenerName listener = ListenerName.normalised("PLAINTEXT");
        ClientInformation software = new ClientInformation("confluent-kafka-python", "2.6.0-rdkafka-2.6.0");
        if (!HAS_CLIENT_PORT) {
            return new RequestContext(header, "conn-1", address, KafkaPrincipal.ANONYMOUS, listener,
                SecurityProtocol.PLAINTEXT, software, false);
        }
        // by reflection: this constructor does not exist in 3.7, which the oldest-kafka profile compiles against
        return RequestContext.class.getConstructor(RequestHeader.class, String.class, InetAddress.class,
                Optional.class, KafkaPrincipal.class, ListenerName.class, SecurityProtocol.class,
                ClientInformation.class, boolean.class)
            .newInstance(header, "conn-1", address, Optional.of(54321), KafkaPrincipal.ANONYMOUS, listener,
                SecurityProtocol.PLAINTEXT, software, false);
    }

    @Test
    void labelsCoverEveryBrokerAddedLabelOfKip714() throws Exception {
        // Given a broker request context as the broker builds it, and a push
        Uuid instance = Uuid.randomUuid();
        // When labels are computed
        Map<String, String> h = PushLabels.of(context("orders-producer"), instance, true,
            "application/x-protobuf", "1", 1000);
        // Then all KIP-714 labels plus the terminating flag and interval are there
        assertEquals(instance.toString(), h.get(PushLabels.H_CLIENT_INSTANCE_ID));
        assertEquals("orders-producer", h.get(PushLabels.H_CLIENT_ID));
        assertEquals("confluent-kafka-python", h.get(PushLabels.H_CLIENT_SOFTWARE_NAME));
        assertEquals("2.6.0-rdkafka-2.6.0", h.get(PushLabels.H_CLIENT_SOFTWARE_VERSION));
        assertEquals("127.0.0.5", h.get(PushLabels.H_CLIENT_SOURCE_ADDRESS));
        // Kafka 3.7's RequestContext has no client port: the label is left out there, never sent empty
        assertEquals(HAS_CLIENT_PORT ? "54321" : null, h.get(PushLabels.H_CLIENT_SOURCE_PORT));
        assertEquals("User:ANONYMOUS", h.get(PushLabels.H_PRINCIPAL));
        assertEquals("1", h.get(PushLabels.H_BROKER_ID));
        assertEquals("PLAINTEXT", h.get(PushLabels.H_LISTENER));
        assertEquals("true", h.get(PushLabels.H_TERMINATING));
        assertEquals("1000", h.get(PushLabels.H_PUSH_INTERVAL_MS));
    }

    @Test
    void unknownIntervalIsLeftOut() throws Exception {
        Map<String, String> h = PushLabels.of(context("c"), Uuid.randomUuid(), false, null, "1", -1);
        assertFalse(h.containsKey(PushLabels.H_PUSH_INTERVAL_MS));
        assertEquals("false", h.get(PushLabels.H_TERMINATING));
    }

    @Test
    void headerValuesCannotCarryCrLfOrRawUnicode() {
        // Given client ids an attacker or a careless user could set
        // Then they are percent-encoded UTF-8, and plain ids stay as they are
        assertEquals("evil%0D%0AX-Injected:%201", PushLabels.encode("evil\r\nX-Injected: 1"));
        assertEquals("caf%C3%A9%25", PushLabels.encode("café%"));
        assertEquals("app-1_x.y:z/w", PushLabels.encode("app-1_x.y:z/w"));
    }
}
