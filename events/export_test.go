package events

// ReadTopicThen is ReadTopic calling then once it took the topic's offsets, before it reads.
var ReadTopicThen = readTopic
