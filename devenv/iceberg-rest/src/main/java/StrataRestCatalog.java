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
    context.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTCatalogAdapter(backend))), "/*");
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
}
