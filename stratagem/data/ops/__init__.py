"""One pipeline op per module; ``stratagem.data.Dataset`` methods construct them."""
