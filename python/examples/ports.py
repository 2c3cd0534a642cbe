"""A free port for MASTER_PORT when the examples start their own ranks (mp.spawn)."""
import random
import socket


def _bindable(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(count=3):
    """A port that, with the count - 1 ports after it, nothing listens on now.

    It is drawn at random below the kernel's ephemeral range: a port from that range (binding
    to port 0, or pid-derived numbers above 32767) can be handed out a moment later as the
    source port of some connection, and the store's listen then fails with EADDRINUSE. Random,
    so that jobs starting side by side do not collide."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    while True:
        port = rng.randrange(20000 if low > 21000 else 1024, low - count)
        if all(_bindable(port + i) for i in range(count)):
            return port


if __name__ == "__main__":
    import sys
    print(free_port(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
