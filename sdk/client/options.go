package client

// prodOption configures a brokerProducer.
type prodOption interface{ applyProducer(*producerConfig) }

// consOption configures a brokerConsumer.
type consOption interface{ applyConsumer(*consumerConfig) }

type producerOpt func(*producerConfig)

func (f producerOpt) applyProducer(c *producerConfig) { f(c) }

type consumerOpt func(*consumerConfig)

func (f consumerOpt) applyConsumer(c *consumerConfig) { f(c) }
