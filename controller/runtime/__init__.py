"""Product-agnostic machinery: the client-go and controller-runtime analogues."""
