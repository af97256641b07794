{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJjMDYxM2RhOWVkOTA2MzgyNzg3M2JmOTcxNGEyNzVmYTEwZTdhZDVjYjdiZjIwNmVhZTg3OTIyYTRmMzU3MTE5In0sIm5hbWUiOiJkZW1vLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "02RuGxNGmftVfyD0ywb5lPM22hvtJOKZsI1Qw8Vk0WsqyUrNk9A/PKvu+VgE4CXMNSs0vjdCDSInNy6o1+9CCQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
