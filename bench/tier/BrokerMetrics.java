import com.sun.tools.attach.VirtualMachine;

import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * Prints a running broker's MBeans matching the given patterns, one "name attribute value" per
 * line, for bench/tier.py. It attaches to the JVM by pid (the local attach mechanism: only the
 * broker's own user can), so the broker needs no JMX port.
 *
 * usage: java BrokerMetrics.java PID PATTERN...
 */
public class BrokerMetrics {
    private static final String[] ATTRIBUTES = {"Count", "Mean", "Max", "Value"};

    public static void main(String[] args) throws Exception {
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String address;
        try {
            address = vm.startLocalManagementAgent();
        } finally {
            vm.detach();
        }
        try (JMXConnector c = JMXConnectorFactory.connect(new JMXServiceURL(address))) {
            MBeanServerConnection s = c.getMBeanServerConnection();
            for (int i = 1; i < args.length; i++) {
                for (ObjectName n : s.queryNames(new ObjectName(args[i]), null)) {
                    for (String a : ATTRIBUTES) {
                        try {
                            System.out.println(n + "\t" + a + "\t" + s.getAttribute(n, a));
                        } catch (Exception absent) {
                            // not every MBean has every attribute
                        }
                    }
                }
            }
        }
    }
}
