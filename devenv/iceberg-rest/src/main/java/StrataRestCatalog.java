import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * The Iceberg REST catalog strata's tests talk to: Apache Iceberg's REST adapter over its JDBC
 * catalog on a SQLite file, on 127.0.0.1 only (a free port unless one is given).
 * Arguments: the SQLite file, the warehouse URL, optionally the port. Prints "LISTENING port".
 * With STRATA_REST_TOKEN set, every request must carry "Authorization: Bearer <token>", and
 * the OAuth2 token endpoint (v1/oauth/tokens) gives that token for the client credentials
 * STRATA_REST_CREDENTIAL ("id:secret") only. While the file STRATA_REST_COMMIT_GATE names
 * exists, table commits wait (and the file "<gate>.held" says one does): tests of what happens
 * while a commit is in flight.
 */
public final class StrataRestCatalog {
  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: StrataRestCatalog <catalog.db> <warehouse url> [port]");
      System.exit(2);
    }
    Catalog backend = CatalogUtil.buildIcebergCatalog(
        "rest_backend",
        Map.of(
            "catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog",
            "uri", "jdbc:sqlite:" + args[0],
            "warehouse", args[1],
            "jdbc.schema-version", "V1"),
        new org.apache.hadoop.conf.Configuration());
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    HttpServlet catalog = new RESTCatalogServlet(new RESTCatalogAdapter(backend));
    String token = System.getenv("STRATA_REST_TOKEN");
    if (token != null) {
      catalog = new Guard(catalog, token, System.getenv("STRATA_REST_CREDENTIAL"));
    }
    String gate = System.getenv("STRATA_REST_COMMIT_GATE");
    if (gate != null) {
      catalog = new Gate(catalog, java.nio.file.Path.of(gate));
    }
    context.addServlet(new ServletHolder(catalog), "/*");
    Server server = new Server();
    ServerConnector http = new ServerConnector(server);
    http.setHost("127.0.0.1");
    http.setPort(args.length > 2 ? Integer.parseInt(args[2]) : 0);
    server.addConnector(http);
    server.setHandler(context);
    server.start();
    System.out.println("LISTENING " + http.getLocalPort());
    System.out.flush();
    server.join();
  }

  /** A servlet in front of the catalog's: sees each request first, passes it on. */
  abstract static class Front extends HttpServlet {
    protected final HttpServlet inner;

    Front(HttpServlet inner) {
      this.inner = inner;
    }

    @Override
    public void init() throws ServletException {
      inner.init(getServletConfig());
    }
  }

  /** The bearer token check in front of the catalog, and the token endpoint. */
  static final class Guard extends Front {
    private final String token;
    private final String credential;

    Guard(HttpServlet inner, String token, String credential) {
      super(inner);
      this.token = token;
      this.credential = credential;
    }

    @Override
    protected void service(HttpServletRequest req, HttpServletResponse resp)
        throws ServletException, IOException {
      if (req.getRequestURI().endsWith("/v1/oauth/tokens")) {
        String client = req.getParameter("client_id") + ":" + req.getParameter("client_secret");
        if (credential != null && credential.equals(client)) {
          reply(resp, 200, "{\"access_token\":\"" + token + "\",\"token_type\":\"bearer\","
              + "\"issued_token_type\":\"urn:ietf:params:oauth:token-type:access_token\","
              + "\"expires_in\":3600}");
        } else {
          reply(resp, 401, "{\"error\":\"invalid_client\","
              + "\"error_description\":\"unknown client credentials\"}");
        }
        return;
      }
      if (!("Bearer " + token).equals(req.getHeader("Authorization"))) {
        reply(resp, 401, "{\"error\":{\"message\":\"Not authorized: no valid bearer token\","
            + "\"type\":\"NotAuthorizedException\",\"code\":401}}");
        return;
      }
      inner.service(req, resp);
    }

    private static void reply(HttpServletResponse resp, int status, String body) throws IOException {
      resp.setStatus(status);
      resp.setContentType("application/json");
      resp.getOutputStream().write(body.getBytes(StandardCharsets.UTF_8));
    }
  }

  /** Holds table commits (a POST to a table's own path) while the gate file exists. */
  static final class Gate extends Front {
    private final java.nio.file.Path gate;
    private final java.nio.file.Path held;

    Gate(HttpServlet inner, java.nio.file.Path gate) {
      super(inner);
      this.gate = gate;
      this.held = java.nio.file.Path.of(gate + ".held");
    }

    @Override
    protected void service(HttpServletRequest req, HttpServletResponse resp)
        throws ServletException, IOException {
      if ("POST".equals(req.getMethod())
          && req.getRequestURI().matches(".*/namespaces/[^/]+/tables/[^/]+")) {
        while (java.nio.file.Files.exists(gate)) {
          if (!java.nio.file.Files.exists(held)) {
            java.nio.file.Files.writeString(held, "held\n");
          }
          try {
            Thread.sleep(20);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            break;
          }
        }
      }
      inner.service(req, resp);
    }
  }
}
