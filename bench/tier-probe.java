// Diagnostic for bench/README.md#tier: reads one tiered segment through `strata tier` the way
// the broker's bridge does (java.net.http, HTTP/1.1, the body as an InputStream), in sequential
// fetches of FETCH_BYTES, and prints the rate. Without the broker in the way, it shows what the
// bridge's HTTP client itself costs per fetch.
//
//   java bench/tier-probe.java SEGMENT_JSON_FILE FETCHES FETCH_BYTES [EXTRA]
//
// SEGMENT_JSON_FILE holds the `segment` object of a stored manifest. EXTRA (default -1) is what
// the request asks for beyond FETCH_BYTES: -1 = to the end of the segment, as the broker does
// (the client reads FETCH_BYTES and hangs up); 0 = exactly FETCH_BYTES (the connection is kept).
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;

public class TierProbe {
    public static void main(String[] a) throws Exception {
        String seg = Files.readString(Path.of(a[0])).trim();
        int fetches = Integer.parseInt(a[1]);
        int want = Integer.parseInt(a[2]);
        long extra = a.length > 3 ? Long.parseLong(a[3]) : -1;
        String addr = System.getenv().getOrDefault("STRATA_TEST_TIER_ADDR", "127.0.0.1:9190");
        HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        byte[] buf = new byte[want];
        for (int round = 0; round < 4; round++) {
            long t0 = System.nanoTime(), total = 0;
            long pos = 0;
            for (int i = 0; i < fetches; i++) {
                String end = extra < 0 ? "null" : Long.toString(pos + want - 1 + extra);
                String body = "{\"segment\":" + seg + ",\"start_position\":" + pos + ",\"end_position\":" + end + "}";
                HttpRequest req = HttpRequest.newBuilder(URI.create("http://" + addr + "/v1/fetch"))
                    .header("Content-Type", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString(body)).build();
                HttpResponse<InputStream> resp = client.send(req, HttpResponse.BodyHandlers.ofInputStream());
                if (resp.statusCode() != 200) {
                    throw new IllegalStateException("HTTP " + resp.statusCode() + ": " + new String(resp.body().readAllBytes()));
                }
                try (InputStream in = resp.body()) {
                    int got = 0;
                    while (got < want) {
                        int k = in.read(buf, got, want - got);
                        if (k < 0) break;
                        got += k;
                    }
                    total += got;
                    pos += got;
                    if (got < want) break; // end of the segment
                }
            }
            double s = (System.nanoTime() - t0) / 1e9;
            if (round > 0) { // the first round warms the JIT up
                System.out.printf("extra %d: %.1f MiB/s, %.2f ms per fetch%n", extra, total / s / 1048576, s * 1000 / fetches);
            }
        }
    }
}
